// Command evictbig is the example of adding an eviction policy: the
// "oldest-biggest" policy (evict the largest of the 4 oldest entries) is
// the header bpf/examples/evictbig.bpf.h, its stubs evictbig.bpf.c (replay)
// and pc_evictbig.bpf.c (the page-cache agent), and one registry row,
// below. Registered, it runs wherever a policy name does: here in replay
// against a trace, beside the built-in LRU and FIFO, with the cache's size
// budget in bytes (docs/eviction.md, "Adding a policy").
//
//	evictbig                                   # the bundled Twitter trace, 1 MB
//	evictbig --trace FILE --format csv --bytes 65536
package main

// A policy of the tree needs no go:generate line: evict's builds every stub.
//go:generate go run ../../internal/bpfobj -I ../../bpf/include ../../bpf/examples/evictbig.bpf.c ../../bpf/examples/pc_evictbig.bpf.c

import (
	"embed"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/rlimit"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/evict/replay"
)

//go:embed *_bpfel.o
var objects embed.FS

// Name is the policy's name in the registry.
const Name = "oldest-biggest"

// The registry row. In the tree it is a line of evict/registry.go's table
// (without Objects: evict embeds every stub's object).
var registered = evict.Register(evict.Policy{Name: Name, Replay: "evictbig", PageCache: "pc_evictbig", Objects: objects})

func main() {
	trace := flag.String("trace", filepath.Join(replay.TraceDir(), "twitter_cluster52_1m.csv.zst"), "trace FILE")
	format := flag.String("format", "twitter", "trace format: twitter|cloudphysics|arc|csv")
	budget := flag.Uint64("bytes", 1<<20, "cache size in bytes")
	flag.Parse()
	if err := run(*trace, *format, *budget); err != nil {
		fmt.Fprintln(os.Stderr, "evictbig:", err)
		os.Exit(1)
	}
}

func run(trace, format string, budget uint64) error {
	if registered != nil {
		return registered
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	reqs, err := replay.ReadFile(trace, format)
	if err != nil {
		return err
	}
	for _, p := range []string{Name, "fifo", "lru"} {
		res, err := replay.Run(reqs, replay.Options{Policy: p, Size: budget, Unit: "bytes"})
		if err != nil {
			return err
		}
		fmt.Printf("%-16s hit ratio %.4f  byte hit ratio %.4f\n", p, res.HitRatio, res.ByteHitRatio)
	}
	return nil
}
