package cache

import (
	"fmt"
	"time"

	"github.com/cistern-ebpf/cistern/evict"
)

// Options of a replay.
type Options struct {
	Policy string // an evict policy name
	Size   uint32 // cache size in Unit
	Unit   string // "objects" (the only unit so far); "" means objects
	Trace  string // name for the result
}

// Result is what a replay measured; its JSON is the output of
// `cistern cache replay --json`.
type Result struct {
	Policy         string            `json:"policy"`
	Trace          string            `json:"trace"`
	Unit           string            `json:"unit"`
	CacheSize      uint32            `json:"cache_size"`
	Requests       uint64            `json:"requests"`
	Hits           uint64            `json:"hits"`
	HitRatio       float64           `json:"hit_ratio"`
	ByteHitRatio   float64           `json:"byte_hit_ratio"`
	RequestsPerSec float64           `json:"requests_per_sec"`
	Fallbacks      uint64            `json:"fallbacks"`
	Counters       map[string]uint64 `json:"-"`
}

// Replay loads opt.Policy with a cache of opt.Size objects and runs reqs
// through it in the kernel. RequestsPerSec counts the replay alone (loading
// and parsing excluded).
func Replay(reqs []evict.Request, opt Options) (Result, error) {
	if opt.Unit == "" {
		opt.Unit = "objects"
	}
	if opt.Unit != "objects" {
		return Result{}, fmt.Errorf("unit %q: only objects is supported so far", opt.Unit)
	}
	if opt.Size == 0 {
		return Result{}, fmt.Errorf("cache size must be at least 1")
	}
	c, err := evict.Open(evict.Config{Policy: opt.Policy, Capacity: opt.Size})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	start := time.Now()
	hits, err := c.Replay(reqs, nil)
	elapsed := time.Since(start)
	if err != nil {
		return Result{}, err
	}
	st, err := c.Stats()
	if err != nil {
		return Result{}, err
	}
	r := Result{
		Policy: opt.Policy, Trace: opt.Trace, Unit: opt.Unit, CacheSize: opt.Size,
		Requests: uint64(len(reqs)), Hits: hits, Fallbacks: st["fallbacks"], Counters: st,
	}
	if r.Requests > 0 {
		r.HitRatio = float64(hits) / float64(r.Requests)
	}
	if st["bytes"] > 0 {
		r.ByteHitRatio = float64(st["hit_bytes"]) / float64(st["bytes"])
	}
	if s := elapsed.Seconds(); s > 0 {
		r.RequestsPerSec = float64(r.Requests) / s
	}
	if st["hits"] != hits || st["requests"] != r.Requests {
		return r, fmt.Errorf("kernel counters disagree: %d hits of %d requests, runs said %d of %d",
			st["hits"], st["requests"], hits, r.Requests)
	}
	return r, nil
}
