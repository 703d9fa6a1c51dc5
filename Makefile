# Cistern — see README.md. Targets that touch the kernel need root.
GO      ?= go
CLANG   ?= clang-19
STRIP   ?= llvm-strip-19
BIN     := bin/cistern
VMLINUX := bpf/include/vmlinux.h
BPF_CFLAGS := -O2 -g -Wall -target bpf -mcpu=v3 -Ibpf/include -fdebug-prefix-map=$(CURDIR)=.
# Objects built outside bpf2go (test fixtures).
FIXTURES := internal/bpfcheck/testdata/unbounded.bpf.o

.PHONY: all deps deps-demo deps-full generate build test demo bench check-generated root clean kernel-matrix image

all: build

root:
	@[ "$$(id -u)" -eq 0 ] || { echo "make: this target needs root: sudo make $(MAKECMDGOALS)" >&2; exit 2; }

# Everything the tests use, Jaeger included (minutes on a fresh machine).
deps: root
	@scripts/deps.sh
deps-full: deps
# Only what `cistern demo` runs (under a minute on a fresh machine).
deps-demo: root
	@scripts/deps.sh demo

$(VMLINUX):
	@mkdir -p $(dir $@)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@

# Rebuilds every BPF object and its Go bindings (bpf2go) with clang-19.
generate: $(VMLINUX)
	$(GO) generate ./...
	$(CLANG) $(BPF_CFLAGS) -c bpf/testdata/unbounded.bpf.c -o internal/bpfcheck/testdata/unbounded.bpf.o
	$(STRIP) -g internal/bpfcheck/testdata/unbounded.bpf.o

# Fails when the committed objects differ from what the sources build to.
check-generated: generate
	@scripts/check-generated.sh

build:
	$(GO) build -o $(BIN) ./cmd/cistern

test: root deps build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# Boots Debian's 6.1, 6.12, sid's newest (7.x) and 5.10 cloud kernels under qemu
# and runs the load-all test, the doctor and every system's tests inside each
# (docs/kernels.md). FULL=1 adds the server tests and writes docs/kernels.md;
# KERNELS=6.1,6.12 picks kernels; MERGE=1 replaces only their rows there.
KERNELS ?= 6.1,6.12,sid,5.10
kernel-matrix: root deps
	@mkdir -p bin
	$(GO) run ./cmd/kernel-matrix --kernels $(KERNELS) --json bin/kernel-matrix.json $(if $(FULL),--full --docs docs/kernels.md --readme README.md) $(if $(MERGE),--merge)

demo: root deps-demo build
	./$(BIN) demo

bench: root deps build
	./$(BIN) bench kv --quick --json bench-kv.json --plot bench-kv.png
	./$(BIN) bench cache --quick --json bench-cache.json --plot bench-cache.png
	./$(BIN) bench cbuf --quick --json bench-cbuf.json --plot bench-cbuf.png

# A FROM scratch image with a static cistern built by the host's Go: no
# registry (deploy/README.md). The binary is written to bin/, never committed.
image: root
	scripts/build-static.sh bin/image/cistern
	podman build --quiet -f deploy/Containerfile.local -t localhost/cistern:dev bin/image

clean:
	rm -rf bin $(VMLINUX)

# libcbuf (C client of CBUF): static + shared library and cbuf.pc.
.PHONY: cbuf-lib cbuf-install
cbuf-lib:
	$(MAKE) -C lib/cbuf
cbuf-install:
	$(MAKE) -C lib/cbuf install
