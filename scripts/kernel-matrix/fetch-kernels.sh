#!/usr/bin/env bash
# Fetches Debian's cloud kernels for the matrix and unpacks each into
# /var/cache/cistern/kernels/<suite>/ (vmlinuz, config, release, lib/modules/<release>
# with modules.dep).
# Uses a private apt configuration per suite so the host's sources and package
# state are never touched. Idempotent: a kernel already unpacked is kept.
#   fetch-kernels.sh [bullseye|bookworm|trixie ...]   (default: all three)
set -euo pipefail

CACHE=${CISTERN_KERNEL_CACHE:-/var/cache/cistern/kernels}
MIRROR=${CISTERN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie bullseye)

for suite in "${suites[@]}"; do
  case $suite in bullseye|bookworm|trixie) ;; *) echo "fetch-kernels: unknown suite $suite (bullseye, bookworm, trixie)" >&2; exit 2;; esac
  apt_dir=$CACHE/apt/$suite
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb $MIRROR $suite main" > "$apt_dir/sources.list"
  A=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
     -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
     -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  # One update a day is plenty for a kernel that changes with point releases.
  if [ -z "$(find "$apt_dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null)" ]; then
    echo "fetch-kernels: apt-get update ($suite, private lists under $apt_dir)"
    apt-get "${A[@]}" -qq update
  fi
  pkg=$(apt-cache "${A[@]}" depends linux-image-cloud-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | grep -v unsigned | head -1)
  [ -n "$pkg" ] || { echo "fetch-kernels: no linux-image-cloud-amd64 in $suite" >&2; exit 1; }
  release=${pkg#linux-image-}
  out=$CACHE/$suite
  if [ -f "$out/release" ] && [ "$(cat "$out/release")" = "$release" ] && [ -f "$out/vmlinuz" ]; then
    echo "fetch-kernels: $suite $release (cached)"
    continue
  fi
  echo "fetch-kernels: downloading $pkg"
  (cd "$apt_dir/cache/archives" && apt-get "${A[@]}" -qq download "$pkg")
  deb=$(ls -t "$apt_dir/cache/archives/${pkg}_"*.deb | head -1)
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/root"
  dpkg-deb -x "$deb" "$out.tmp/root"
  cp "$out.tmp/root/boot/vmlinuz-$release" "$out.tmp/vmlinuz"
  cp "$out.tmp/root/boot/config-$release" "$out.tmp/config"
  mkdir -p "$out.tmp/lib/modules"
  mv "$out.tmp/root/lib/modules/$release" "$out.tmp/lib/modules/" 2>/dev/null || mv "$out.tmp/root/usr/lib/modules/$release" "$out.tmp/lib/modules/"
  rm -rf "$out.tmp/root"
  # modules.dep, for the initramfs builder to load each module after its dependencies.
  depmod -b "$out.tmp" "$release"
  echo "$release" > "$out.tmp/release"
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "fetch-kernels: $suite $release unpacked in $out"
done
