#!/usr/bin/env bash
# libCacheSim's reference miss ratios for evict/replay's TestMatchesLibCacheSim:
# writes evict/replay/testdata/libcachesim.json (committed). libCacheSim is
# PyPI's libcachesim 0.3.5, installed in a venv ($LIBCACHESIM_VENV, default
# /tmp/cistern-libcachesim); it replays the very keys evict/replay parses
# (scripts/libcachesim writes them). About 10 minutes on 2 cores (LFU and LHD are the slow ones).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LIBCACHESIM_VENV:-/tmp/cistern-libcachesim}
if ! "$venv/bin/python" -c 'import libcachesim' 2>/dev/null; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q libcachesim==0.3.5
fi
keys=$(mktemp -d)
trap 'rm -rf "$keys"' EXIT
go run ./scripts/libcachesim -out "$keys"
"$venv/bin/python" scripts/libcachesim/refs.py "$keys" >evict/replay/testdata/libcachesim.json.new
mv evict/replay/testdata/libcachesim.json.new evict/replay/testdata/libcachesim.json
