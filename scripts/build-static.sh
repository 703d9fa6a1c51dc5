#!/bin/sh
# Builds the static cistern of the container image: CGO off (no libc to
# match), the BPF objects embedded, paths trimmed and no build id, so the
# same Go version gives the same bytes. Used by `make image` (the host's Go)
# and by deploy/Containerfile's build stage (a golang image's Go).
#   scripts/build-static.sh OUT
set -eu
out=${1:?usage: build-static.sh OUT}
cd "$(dirname "$0")/.."
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -buildid=" -o "$out" ./cmd/cistern
