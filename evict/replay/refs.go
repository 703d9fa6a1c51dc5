package replay

import (
	"path/filepath"

	"github.com/cistern-ebpf/cistern/evict/sim"
)

// RefTrace is a trace the libCacheSim comparison replays: a bundled trace
// (File, Format) or, without File, the headroom issue's zipf trace.
type RefTrace struct {
	Name   string
	File   string
	Format string
	Sizes  []uint64 // cache sizes compared, in objects
}

// The zipf trace: ZipfN requests, zipf 1.1 over ZipfPages pages (sim.ZipfKeys).
const (
	ZipfN     = 1000000
	ZipfPages = 262144
	ZipfSeed  = 1
)

// LibCacheSimTraces are the traces and sizes of the comparison with
// libCacheSim (CloudPhysics, 8.2M block requests, is left out: libCacheSim's
// Python reader takes minutes per policy on it) (scripts/libcachesim-refs.sh writes its figures to
// testdata/libcachesim.json; TestMatchesLibCacheSim replays them).
var LibCacheSimTraces = []RefTrace{
	{Name: "twitter", File: "twitter_cluster52_1m.csv.zst", Format: "twitter", Sizes: []uint64{1000, 10000, 50000}},
	{Name: "arc", File: "arc_oltp.lis.zst", Format: "arc", Sizes: []uint64{1000, 10000, 50000}},
	{Name: "zipf", Sizes: []uint64{60000}},
}

// Keys are the trace's request keys, in order.
func (t RefTrace) Keys() ([]uint64, error) {
	if t.File == "" {
		return sim.ZipfKeys(ZipfN, ZipfPages, 1.1, ZipfSeed), nil
	}
	reqs, err := ReadFile(filepath.Join(TraceDir(), t.File), t.Format)
	if err != nil {
		return nil, err
	}
	keys := make([]uint64, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	return keys, nil
}
