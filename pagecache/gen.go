package pagecache

// The tracker's object, embedded and looked up by name (internal/bpfobj:
// no bindings). The policies' objects are package evict's (its registry).
//go:generate go run ../internal/bpfobj -I ../bpf/include ../bpf/pagecache/track.bpf.c

import (
	"bytes"
	_ "embed"

	"github.com/cilium/ebpf"
)

//go:embed track_bpfel.o
var trackObject []byte

func loadTrack() (*ebpf.CollectionSpec, error) {
	return ebpf.LoadCollectionSpecFromReader(bytes.NewReader(trackObject))
}
