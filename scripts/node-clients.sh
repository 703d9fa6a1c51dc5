#!/usr/bin/env bash
# Installs the Node.js database clients the capture tests drive (node-postgres
# `pg`, `mysql2`), at the versions bench/capture/node/package-lock.json pins,
# with `npm ci` into /var/cache/cistern/node (CISTERN_NODE_DIR overrides).
# Run by scripts/deps.sh; idempotent: reinstalls only when the lock changed.
#   scripts/node-clients.sh            install if needed
#   scripts/node-clients.sh --check    exit 0 if installed and current
set -euo pipefail
src=$(cd "$(dirname "$0")/../bench/capture/node" && pwd)
dir=${CISTERN_NODE_DIR:-/var/cache/cistern/node}
current() { cmp -s "$src/package-lock.json" "$dir/package-lock.json" && [ -d "$dir/node_modules/pg" ] && [ -d "$dir/node_modules/mysql2" ]; }
if [ "${1:-}" = --check ]; then current; exit; fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "node-clients: Node.js and npm are not installed (the tests use Node.js 20 from nodejs.org or NodeSource)" >&2; exit 1; }
current && exit 0
mkdir -p "$dir"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
# --ignore-scripts: neither package needs an install script; none runs as root here.
cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund
