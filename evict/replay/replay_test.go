package replay

import (
	"container/list"
	"path/filepath"
	"testing"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func bundled(t *testing.T, file, format string) []evict.Request {
	t.Helper()
	path := filepath.Join(TraceDir(), file)
	testenv.NeedFile(t, path, "the bundled traces: /work/shared/data/traces beside the clone (../shared), or CISTERN_TRACES")
	reqs, err := ReadFile(path, format)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// refLRU is a plain LRU in Go: the hits it finds on reqs.
func refLRU(reqs []evict.Request, size int) uint64 {
	l := list.New()
	where := map[uint64]*list.Element{}
	var hits uint64
	for _, r := range reqs {
		if e, ok := where[r.Key]; ok {
			hits++
			l.MoveToFront(e)
			continue
		}
		if l.Len() == size {
			e := l.Back()
			delete(where, e.Value.(uint64))
			l.Remove(e)
		}
		where[r.Key] = l.PushFront(r.Key)
	}
	return hits
}

// TestReplayMatchesReferenceLRU replays the Twitter trace's first 200,000
// requests through the kernel LRU and a Go LRU: the hits must be equal.
func TestReplayMatchesReferenceLRU(t *testing.T) {
	testenv.RequireRoot(t)
	reqs := bundled(t, "twitter_cluster52_1m.csv.zst", "twitter")[:200000]
	for _, size := range []int{100, 5000} {
		res, err := Run(reqs, Options{Policy: "lru", Size: uint64(size)})
		if err != nil {
			t.Fatal(err)
		}
		if want := refLRU(reqs, size); res.Hits != want {
			t.Errorf("size %d: kernel LRU %d hits, reference %d", size, res.Hits, want)
		}
	}
}

// TestReplayIsDeterministic replays the same trace twice per policy.
func TestReplayIsDeterministic(t *testing.T) {
	testenv.RequireRoot(t)
	reqs := bundled(t, "arc_oltp.lis.zst", "arc")[:300000]
	for _, p := range []string{"fifo", "lru", "mru", "clock", "sieve", "s3fifo", "lhd"} {
		opt := Options{Policy: p, Size: 2000, Trace: "arc"}
		a, err := Run(reqs, opt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(reqs, opt)
		if err != nil {
			t.Fatal(err)
		}
		a.RequestsPerSec, b.RequestsPerSec = 0, 0
		if a.Hits != b.Hits || a.ByteHitRatio != b.ByteHitRatio || a.Fallbacks != 0 || b.Fallbacks != 0 {
			t.Errorf("%s: run 1 %+v, run 2 %+v", p, a, b)
		}
		if a.Hits == 0 || a.Hits >= a.Requests {
			t.Errorf("%s: %d hits of %d requests", p, a.Hits, a.Requests)
		}
	}
}

func TestReplayOptions(t *testing.T) {
	if _, err := Run(nil, Options{Policy: "lru", Size: 10, Unit: "pages"}); err == nil {
		t.Error("unit pages accepted")
	}
	if _, err := Run(nil, Options{Policy: "lru"}); err == nil {
		t.Error("size 0 accepted")
	}
}

// refLRUBytes is a Go LRU bounded by the sum of sizes (libCacheSim's rule:
// evict from the tail until the new object fits; never admit one larger
// than the cache): its hits and hit bytes on reqs.
func refLRUBytes(reqs []evict.Request, budget uint64) (hits, hitBytes uint64) {
	type ent struct {
		key  uint64
		size uint64
	}
	l := list.New()
	where := map[uint64]*list.Element{}
	var used uint64
	for _, r := range reqs {
		if e, ok := where[r.Key]; ok {
			hits++
			hitBytes += uint64(r.Size)
			l.MoveToFront(e)
			continue
		}
		if uint64(r.Size) > budget {
			continue
		}
		for used+uint64(r.Size) > budget {
			e := l.Back()
			v := e.Value.(ent)
			delete(where, v.key)
			used -= v.size
			l.Remove(e)
		}
		where[r.Key] = l.PushFront(ent{r.Key, uint64(r.Size)})
		used += uint64(r.Size)
	}
	return hits, hitBytes
}

// TestReplayBytesMatchesReferenceLRU: --unit bytes on Twitter sizes, and an
// object larger than the whole cache, which is never admitted.
func TestReplayBytesMatchesReferenceLRU(t *testing.T) {
	testenv.RequireRoot(t)
	reqs := bundled(t, "twitter_cluster52_1m.csv.zst", "twitter")[:200000]
	reqs = append(reqs, evict.Request{Key: 1, Size: 2000000}, evict.Request{Key: 1, Size: 2000000})
	for _, budget := range []uint64{20000, 1000000} {
		res, err := Run(reqs, Options{Policy: "lru", Size: budget, Unit: "bytes"})
		if err != nil {
			t.Fatal(err)
		}
		hits, hitBytes := refLRUBytes(reqs, budget)
		if res.Hits != hits || res.Counters["hit_bytes"] != hitBytes {
			t.Errorf("budget %d: kernel %d hits/%d bytes, reference %d/%d",
				budget, res.Hits, res.Counters["hit_bytes"], hits, hitBytes)
		}
		if res.Counters["too_big"] != 2 || res.Fallbacks != 0 {
			t.Errorf("budget %d: counters %v", budget, res.Counters)
		}
		if res.ByteHitRatio <= 0 || res.ByteHitRatio >= 1 {
			t.Errorf("budget %d: byte hit ratio %v", budget, res.ByteHitRatio)
		}
	}
}
