#!/usr/bin/env bash
# Installs, from Debian's packages, everything Cistern builds and tests with.
# Idempotent: installs only what is missing, and runs apt-get update at most once.
set -euo pipefail

pkgs=(
  clang-19 llvm-19 bpftool libbpf-dev   # BPF toolchain (make generate)
  iproute2 ethtool                      # namespaces, veth, offloads
  memcached libmemcached-tools          # Kerby-KV source of truth; memccapable, memcaslap (real clients)
  postgresql postgresql-contrib openssl # capture: server, pgbench, TLS certificates
  mariadb-server mariadb-client sysbench # capture --protocol mysql: server, client, bench load
  fio ripgrep bpftrace                  # benchmark workloads and the reference tracer
  prometheus                            # exporter tests: a real Prometheus scrapes it
  gcc libjemalloc-dev                   # cbuf: C library, bench peers, jemalloc baseline
  linux-source-6.1                      # bench pagecache: the tree ripgrep searches
  qemu-system-x86 busybox-static cpio xz-utils zstd kmod pkg-config  # kernel matrix VMs; cbuf install test
)

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: run as root (sudo make deps)" >&2
  exit 2
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Package scripts must not start system-wide servers: Cistern starts its own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v go >/dev/null || { echo "deps: Go is not installed (install Go 1.24 or newer)" >&2; exit 1; }
"$(dirname "$0")/jaeger.sh"
echo "deps: all present"
