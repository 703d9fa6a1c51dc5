#!/usr/bin/env bash
# Installs, from Debian's packages, everything Cistern builds and tests with.
# Idempotent: installs only what is missing, and runs apt-get update at most once.
#   scripts/deps.sh          everything (make deps, make test): the packages below, then Jaeger
#   scripts/deps.sh demo     only what `cistern demo` runs (make deps-demo): seconds, not minutes
# One line per step, with its elapsed time.
set -euo pipefail

pkgs=(
  clang-19 llvm-19 bpftool libbpf-dev   # BPF toolchain (make generate)
  iproute2 ethtool                      # namespaces, veth, offloads
  memcached libmemcached-tools          # Kerby-KV source of truth; memccapable, memcaslap (real clients)
  postgresql postgresql-contrib openssl # capture: server, pgbench, TLS certificates
  mariadb-server mariadb-client sysbench # capture --protocol mysql: server, client, bench load
  fio ripgrep bpftrace                  # benchmark workloads and the reference tracer
  rocksdb-tools                         # bench pagecache/query --workload rocksdb: db_bench
  librocksdb-dev patch                  # bench pagecache --workload ycsb: go-ycsb's RocksDB binding (scripts/go-ycsb.sh)
  prometheus                            # exporter tests: a real Prometheus scrapes it
  gcc libjemalloc-dev                   # cbuf: C library, bench peers, jemalloc baseline
  nginx apache2 wrk libfcgi-dev         # cbuf web workload: FastCGI baselines and load
  linux-source-6.1                      # bench pagecache: the tree ripgrep searches
  qemu-system-x86 busybox-static cpio xz-utils zstd kmod pkg-config  # kernel matrix VMs; cbuf install test
  podman runc slirp4netns               # deploy: the DaemonSet's pod under podman (runc; ports on 127.0.0.1)
)

# What `cistern demo` runs, and nothing else (docs/development.md has the timings).
demo=(
  iproute2 ethtool memcached            # Kerby-KV segment: memcached in a network namespace
  postgresql openssl                    # capture segment: PostgreSQL with TLS, psql
  gcc libc6-dev                         # CBUF segment: the C peer of the ping-pong
  ripgrep linux-source-6.1 xz-utils     # page-cache segment: ripgrep over the Linux tree
)

mode=${1:-all}
case $mode in
  all) want=("${pkgs[@]}") ;;
  demo) want=("${demo[@]}") ;;
  *) echo "deps: unknown set '$mode' (all, demo)" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: run as root (sudo make deps)" >&2
  exit 2
fi

t0=$(date +%s)
# step NAME CMD...: runs CMD with its output in a log, prints one line with the time.
log=$(mktemp /tmp/cistern-deps.XXXXXX)
trap 'rm -f "$log" /usr/sbin/policy-rc.d' EXIT
step() {
  local name=$1 s; shift
  s=$(date +%s)
  printf 'deps: %-44s' "$name"
  if ! "$@" >"$log" 2>&1; then
    echo " FAILED after $(( $(date +%s) - s )) s:"; tail -20 "$log" >&2; exit 1
  fi
  echo " $(( $(date +%s) - s )) s"
}

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  step "apt-get update" apt-get update -qq
  # Package scripts must not start system-wide servers: Cistern starts its own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  step "install ${#missing[@]} packages (${missing[*]:0:4}$([ ${#missing[@]} -gt 4 ] && echo ' …'))" \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: packages ($mode): all ${#want[@]} present"
fi

command -v go >/dev/null || { echo "deps: Go is not installed (install Go 1.24 or newer)" >&2; exit 1; }
if [ "$mode" = all ]; then
  if [ -x /usr/local/lib/cistern/jaeger ] && [ "$("$(dirname "$0")/jaeger.sh" --version)" = current ]; then
    echo "deps: Jaeger v2 present"
  else
    step "Jaeger v2 from source (once; ~7 min)" "$(dirname "$0")/jaeger.sh"
  fi
  if [ "$("$(dirname "$0")/go-ycsb.sh" --version)" = current ]; then
    echo "deps: go-ycsb present"
  else
    step "go-ycsb with RocksDB from source (once)" "$(dirname "$0")/go-ycsb.sh"
  fi
fi
if [ "$mode" = all ]; then
  if ! command -v node >/dev/null; then
    echo "deps: Node.js is not installed: the capture tests of Node.js clients will skip (install Node.js 20 from nodejs.org or NodeSource)"
  elif "$(dirname "$0")/node-clients.sh" --check; then
    echo "deps: Node.js clients (pg, mysql2) present"
  else
    step "Node.js clients (npm ci: pg, mysql2)" "$(dirname "$0")/node-clients.sh"
  fi
fi
echo "deps: $mode: done in $(( $(date +%s) - t0 )) s"
