// Command libcachesim writes the request keys that evict/replay's
// libCacheSim comparison replays, one file per trace (8-byte little-endian
// keys), so that libCacheSim (refs.py) runs the very sequences Cistern
// parses. Run by scripts/libcachesim-refs.sh; see docs/eviction.md.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cistern-ebpf/cistern/evict/replay"
)

func main() {
	out := flag.String("out", "", "directory for <trace>.keys")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: libcachesim -out DIR")
		os.Exit(2)
	}
	type listed struct {
		Name  string   `json:"name"`
		Sizes []uint64 `json:"sizes"`
	}
	var list []listed
	for _, tr := range replay.LibCacheSimTraces {
		list = append(list, listed{tr.Name, tr.Sizes})
		keys, err := tr.Keys()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := write(filepath.Join(*out, tr.Name+".keys"), keys); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%s: %d requests\n", tr.Name, len(keys))
	}
	b, err := json.Marshal(list)
	if err == nil {
		err = os.WriteFile(filepath.Join(*out, "traces.json"), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func write(path string, keys []uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var b [8]byte
	for _, k := range keys {
		binary.LittleEndian.PutUint64(b[:], k)
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
