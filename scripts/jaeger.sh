#!/usr/bin/env bash
# Builds Jaeger v2 (the OTLP receiver capture's --otlp tests send spans to)
# into /usr/local/lib/cistern/jaeger, once. `go install` refuses it (its
# go.mod has replace directives), so it is built as a tool of a module of its
# own under /var/cache/cistern/tools. Takes about 7 minutes the first time;
# `make deps` (or `make deps-full`) runs it, `make deps-demo` does not.
# With --version: prints "current" when the built one is this version.
set -euo pipefail
version=v1.76.0 # Jaeger v2's binary, from the v1 module's tags
out=/usr/local/lib/cistern/jaeger
stamp=$out.version
if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  [ "${1:-}" = --version ] && echo current
  exit 0
fi
[ "${1:-}" = --version ] && { echo missing; exit 0; }
mod=/var/cache/cistern/tools/jaeger-$version
mkdir -p "$mod" "$(dirname "$out")"
cd "$mod"
[ -f go.mod ] || go mod init cistern-tools/jaeger >/dev/null 2>&1
echo "deps: building Jaeger $version (the OTLP receiver of the capture tests; a few minutes, once)"
go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version" >/dev/null 2>&1
go build -o "$out" github.com/jaegertracing/jaeger/cmd/jaeger
echo "$version" > "$stamp"
