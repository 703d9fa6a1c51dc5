#!/usr/bin/env bash
# Builds go-ycsb (github.com/pingcap/go-ycsb, YCSB's core workload and
# generators in Go) with its RocksDB binding into /usr/local/lib/cistern/go-ycsb,
# once: `bench pagecache --workload ycsb` drives RocksDB with it. Built as a
# tool of a module of its own under /var/cache/cistern/tools, so Cistern's own
# module never needs cgo or RocksDB's headers.
#
# The binding is cgo over github.com/tecbot/gorocksdb (2019), written for
# RocksDB 6.x; Debian 12 ships 7.8 (librocksdb-dev), whose C API removed seven
# deprecated no-op setters and rocksdb_filterpolicy_create, added an error
# argument to rocksdb_approximate_sizes(_cf) and takes a double for the bloom
# filter's bits per key. go-ycsb calls none of the removed ones;
# go-ycsb/gorocksdb-rocksdb7.patch adapts those calls (a go.mod replace onto the
# patched copy) and nothing else.
# With --version: prints "current" when the built one is this version and patch.
set -euo pipefail
version=v1.0.3
gorocksdb=v0.0.0-20191217155057-f0fad39f321c # what go-ycsb v1.0.3 requires
here=$(cd "$(dirname "$0")" && pwd)
patchfile=$here/go-ycsb/gorocksdb-rocksdb7.patch
want="$version $(sha256sum "$patchfile" | cut -c1-12)"
out=/usr/local/lib/cistern/go-ycsb
stamp=$out.version
if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  [ "${1:-}" = --version ] && echo current
  exit 0
fi
[ "${1:-}" = --version ] && { echo missing; exit 0; }
[ -f /usr/include/rocksdb/c.h ] || { echo "go-ycsb: librocksdb-dev is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
mod=/var/cache/cistern/tools/go-ycsb-$version
rm -rf "$mod"
mkdir -p "$mod" "$(dirname "$out")"
cd "$mod"
go mod init cistern-tools/go-ycsb >/dev/null 2>&1
src=$(go mod download -json "github.com/tecbot/gorocksdb@$gorocksdb" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$src" gorocksdb
chmod -R u+w gorocksdb
printf 'module github.com/tecbot/gorocksdb\n\ngo 1.13\n' > gorocksdb/go.mod
patch -s -d gorocksdb -p1 < "$patchfile"
go mod edit -replace github.com/tecbot/gorocksdb=./gorocksdb
# go-ycsb's own go.mod pins thrift so (its pegasus client needs the old API);
# a dependency's replace directives do not apply to the module that builds it.
go mod edit -replace github.com/apache/thrift=github.com/apache/thrift@v0.0.0-20171203172758-327ebb6c2b6d
echo "deps: building go-ycsb $version with RocksDB (bench pagecache --workload ycsb; a few minutes, once)"
go get -tool "github.com/pingcap/go-ycsb/cmd/go-ycsb@$version" >/dev/null 2>&1
go build -tags rocksdb -o "$out.tmp" github.com/pingcap/go-ycsb/cmd/go-ycsb
mv "$out.tmp" "$out"
echo "$want" > "$stamp"
