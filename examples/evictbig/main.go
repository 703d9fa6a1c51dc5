// Command evictbig is the example of writing an eviction policy on
// cistern/evict.bpf.h: bpf/examples/evictbig.bpf.c ("oldest-biggest":
// evict the largest of the 4 oldest entries) is loaded with package evict
// and replayed in the kernel against a trace, beside the built-in LRU and
// FIFO, with the cache's size budget in bytes.
//
//	evictbig                                   # the bundled Twitter trace, 1 MB
//	evictbig --trace FILE --format csv --bytes 65536
package main

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel evictbig ../../bpf/examples/evictbig.bpf.c

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/rlimit"

	"github.com/cistern-ebpf/cistern/cache"
	"github.com/cistern-ebpf/cistern/evict"
)

// Open loads the example policy with a cache of budget bytes.
func Open(budget uint64, slots uint32) (*evict.Cache, error) {
	spec, err := loadEvictbig()
	if err != nil {
		return nil, err
	}
	// OpenSpec sizes the header's maps (Config.Apply) and runs init.
	return evict.OpenSpec(spec, evict.Config{Policy: "evictbig", Capacity: slots, Bytes: budget})
}

// HitRatio replays reqs through c and returns its object and byte hit ratios.
func HitRatio(c *evict.Cache, reqs []evict.Request) (float64, float64, error) {
	hits, err := c.Replay(reqs, nil)
	if err != nil {
		return 0, 0, err
	}
	st, err := c.Stats()
	if err != nil {
		return 0, 0, err
	}
	if len(reqs) == 0 || st["bytes"] == 0 {
		return 0, 0, nil
	}
	return float64(hits) / float64(len(reqs)), float64(st["hit_bytes"]) / float64(st["bytes"]), nil
}

func main() {
	trace := flag.String("trace", filepath.Join(cache.TraceDir(), "twitter_cluster52_1m.csv.zst"), "trace FILE")
	format := flag.String("format", "twitter", "trace format: twitter|cloudphysics|arc|csv")
	budget := flag.Uint64("bytes", 1<<20, "cache size in bytes")
	flag.Parse()
	if err := run(*trace, *format, *budget); err != nil {
		fmt.Fprintln(os.Stderr, "evictbig:", err)
		os.Exit(1)
	}
}

func run(trace, format string, budget uint64) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	reqs, err := cache.ReadFile(trace, format)
	if err != nil {
		return err
	}
	slots := uint32(min(uint64(cache.Distinct(reqs)), budget, 1<<30))
	c, err := Open(budget, slots)
	if err != nil {
		return err
	}
	defer c.Close()
	hr, bhr, err := HitRatio(c, reqs)
	if err != nil {
		return err
	}
	fmt.Printf("%-16s hit ratio %.4f  byte hit ratio %.4f\n", "oldest-biggest", hr, bhr)
	for _, p := range []string{"fifo", "lru"} {
		res, err := cache.Replay(reqs, cache.Options{Policy: p, Size: budget, Unit: "bytes"})
		if err != nil {
			return err
		}
		fmt.Printf("%-16s hit ratio %.4f  byte hit ratio %.4f\n", p, res.HitRatio, res.ByteHitRatio)
	}
	return nil
}
