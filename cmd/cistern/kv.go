package main

import "github.com/spf13/cobra"

func newKVCmd() *cobra.Command {
	return group("kv", "Kerby-KV: memcached answered at XDP from a kernel block pool",
		planned("serve", "Serve memcached GETs at XDP", "#3"),
		planned("stats", "Read Kerby-KV counters", "#3"))
}
