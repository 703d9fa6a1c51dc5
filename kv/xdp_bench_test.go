package kv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkXDPGet times kv_xdp answering GET hits in the kernel
// (BPF_PROG_TEST_RUN, one run per request since a run rewrites its packet
// into the reply): the program and its helpers without the driver, the
// per-request cost behind bench kv's kernel rows. Keys and values as there:
// 8-byte keys, 3 of 4 values 128 B, 1 of 4 1 KiB.
//
//	go test -run '^$' -bench XDPGet ./kv/
func BenchmarkXDPGet(b *testing.B) {
	const keys = 4096
	for _, l := range []struct {
		name string
		cfg  Config
	}{
		{"kerby", Config{Mode: ModeKerby, BlockSize: 128, MaxBlocks: 8, PoolMB: 8}},
		{"fixed128", Config{Mode: ModeFixed, SlotSize: 128, PoolMB: 8}},
		{"fixed1024", Config{Mode: ModeFixed, SlotSize: 1024, PoolMB: 16}},
	} {
		h := newHarness(b, l.cfg)
		reqs := make([][]byte, keys)
		for k := range keys {
			size := 128
			if k%4 == 3 {
				size = 1024
			}
			key := fmt.Sprintf("%08x", k)
			h.set(key, 7, []byte(strings.Repeat("v", size)))
			reqs[k] = mcRequest(1, "get "+key+"\r\n")
		}
		b.Run(l.name, func(b *testing.B) {
			var total time.Duration
			hits := 0
			for i := range b.N {
				ret, d, err := h.xdp.Benchmark(reqs[(i*2654435761)%keys], 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				if ret == xdpTX {
					hits++
				}
				total += d
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "kernel-ns/get")
			b.ReportMetric(float64(hits)/float64(b.N), "hits/get")
		})
	}
}
