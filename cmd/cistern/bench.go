package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return group("bench", "Benchmarks: print a table, write JSON, draw a PNG",
		planned("kv", "Kerby-KV against memcached and fixed slots", "#3"),
		planned("capture", "Accumulated against naive capture", "#4"),
		planned("cache", "Eviction policies over bundled traces", "#5"),
		planned("pagecache", "Page-cache agent against the kernel LRU", "#6"),
		planned("cbuf", "CBUF against pipes, sockets and iceoryx2", "#7"),
		planned("query", "SQL queries against hand-written eBPF and bpftrace", "#8"))
}
