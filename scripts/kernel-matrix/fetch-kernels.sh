#!/usr/bin/env bash
# Fetches Debian's cloud kernels for the matrix and unpacks each into
# /var/cache/cistern/kernels/<suite>/ (vmlinuz, config, release, lib/modules/<release>
# with modules.dep).
# Uses a private apt configuration per suite so the host's sources and package
# state are never touched. Idempotent: a kernel already unpacked is kept.
#   fetch-kernels.sh [bullseye|bookworm|trixie|sid ...]   (default: all four)
# sid (unstable) serves the newest kernel (7.x). From 7.x Debian splits it:
# linux-image-<release> is a metapackage over linux-binary-<release>
# (vmlinuz), linux-modules-<release> and linux-base-<release> (config), and
# vmlinuz and config live under /usr/lib/modules/<release>/, not /boot.
set -euo pipefail

CACHE=${CISTERN_KERNEL_CACHE:-/var/cache/cistern/kernels}
MIRROR=${CISTERN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie sid bullseye)

for suite in "${suites[@]}"; do
  case $suite in bullseye|bookworm|trixie|sid) ;; *) echo "fetch-kernels: unknown suite $suite (bullseye, bookworm, trixie, sid)" >&2; exit 2;; esac
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
  # The split layout (7.x): the image package is a metapackage; fetch its parts.
  pkgs=("$pkg")
  if apt-cache "${A[@]}" depends "$pkg" | grep -q "Depends: linux-binary-$release\$"; then
    pkgs=("linux-binary-$release" "linux-modules-$release" "linux-base-$release")
  fi
  echo "fetch-kernels: downloading ${pkgs[*]}"
  (cd "$apt_dir/cache/archives" && apt-get "${A[@]}" -qq download "${pkgs[@]}")
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/root"
  for p in "${pkgs[@]}"; do
    deb=$(ls -t "$apt_dir/cache/archives/${p}_"*.deb | head -1)
    dpkg-deb -x "$deb" "$out.tmp/root"
  done
  for f in vmlinuz config; do
    for src in "$out.tmp/root/boot/$f-$release" "$out.tmp/root/usr/lib/modules/$release/$f" "$out.tmp/root/lib/modules/$release/$f"; do
      if [ -f "$src" ]; then mv "$src" "$out.tmp/$f"; break; fi
    done
    [ -f "$out.tmp/$f" ] || { echo "fetch-kernels: no $f in ${pkgs[*]}" >&2; exit 1; }
  done
  mkdir -p "$out.tmp/lib/modules"
  mv "$out.tmp/root/lib/modules/$release" "$out.tmp/lib/modules/" 2>/dev/null || mv "$out.tmp/root/usr/lib/modules/$release" "$out.tmp/lib/modules/"
  rm -rf "$out.tmp/root"
  # modules.dep, for the initramfs builder to load each module after its dependencies.
  depmod -b "$out.tmp" "$release"
  echo "$release" > "$out.tmp/release"
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "fetch-kernels: $suite $release unpacked in $out"
done
