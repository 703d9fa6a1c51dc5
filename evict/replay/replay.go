package replay

import (
	"fmt"
	"time"

	"github.com/cistern-ebpf/cistern/evict"
)

// Options of a replay.
type Options struct {
	Policy string // an evict policy name
	Size   uint64 // cache size in Unit
	Unit   string // "objects" ("" too) or "bytes" (sum of request sizes)
	Trace  string // name for the result
}

// Result is what a replay measured; its JSON is the output of
// `cistern cache replay --json`.
type Result struct {
	Policy         string            `json:"policy"`
	Trace          string            `json:"trace"`
	Unit           string            `json:"unit"`
	CacheSize      uint64            `json:"cache_size"`
	Requests       uint64            `json:"requests"`
	Hits           uint64            `json:"hits"`
	HitRatio       float64           `json:"hit_ratio"`
	ByteHitRatio   float64           `json:"byte_hit_ratio"`
	RequestsPerSec float64           `json:"requests_per_sec"`
	Fallbacks      uint64            `json:"fallbacks"`
	Counters       map[string]uint64 `json:"-"`
}

// Units are the units of Options.Size.
var Units = []string{"objects", "bytes"}

// Run loads opt.Policy with a cache of opt.Size objects (or bytes) and
// runs reqs through it in the kernel. RequestsPerSec counts the replay alone
// (loading and parsing excluded).
func Run(reqs []evict.Request, opt Options) (Result, error) {
	if opt.Unit == "" {
		opt.Unit = "objects"
	}
	if opt.Size == 0 {
		return Result{}, fmt.Errorf("cache size must be at least 1")
	}
	cfg := evict.Config{Policy: opt.Policy}
	switch opt.Unit {
	case "objects":
		if opt.Size > 1<<30 {
			return Result{}, fmt.Errorf("cache size %d: at most %d objects", opt.Size, 1<<30)
		}
		cfg.Capacity = uint32(opt.Size)
	case "bytes":
		// Slots for as many entries as can be resident at once: never more
		// than the distinct keys, nor than the budget (every size >= 1).
		cfg.Bytes = opt.Size
		cfg.Capacity = uint32(max(1, min(uint64(Distinct(reqs)), opt.Size, 1<<30)))
	default:
		return Result{}, fmt.Errorf("unit %q: want objects or bytes", opt.Unit)
	}
	c, err := evict.Open(cfg)
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
