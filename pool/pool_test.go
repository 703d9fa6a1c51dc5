package pool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func open(t *testing.T, cfg Config) *Objects {
	t.Helper()
	testenv.RequireRoot(t)
	o, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*13)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	o := open(t, Config{BlockSize: 128, MaxBlocks: 8, CapacityBlocks: 1024, MaxObjects: 64})
	for i, n := range []int{0, 1, 127, 128, 129, 1023, 1024} {
		want := pattern(n, byte(i))
		if err := o.Write(uint64(i), want); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		got, err := o.Read(uint64(i))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes: %v (%d bytes back)", n, err, len(got))
		}
	}
	if err := o.Write(99, pattern(1025, 1)); !errors.Is(err, ErrTooBig) {
		t.Fatalf("1025 bytes: %v, want ErrTooBig", err)
	}
	if _, err := o.Read(12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read absent: %v", err)
	}
	st, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	payload := uint64(0 + 1 + 127 + 128 + 129 + 1023 + 1024)
	blocks := uint64(0 + 1 + 1 + 1 + 2 + 8 + 8)
	if st.Objects != 7 || st.PayloadBytes != payload || st.LiveBlocks != blocks || st.LeakedBlocks != 0 {
		t.Fatalf("stats %+v", st)
	}
	if want := float64(payload) / float64(blocks*128); st.MemoryEfficiency != want {
		t.Fatalf("efficiency %v, want %v", st.MemoryEfficiency, want)
	}
	if st.Counters["oversize"] != 1 {
		t.Fatalf("oversize not counted: %v", st.Counters)
	}
	for i := 0; i < 7; i++ {
		if err := o.Free(uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ = o.Stats(); st.LiveBlocks != 0 || st.Objects != 0 {
		t.Fatalf("after free: %+v", st)
	}
}

func TestResizeChangesOnlyTheTail(t *testing.T) {
	o := open(t, Config{BlockSize: 64, MaxBlocks: 8, CapacityBlocks: 256, MaxObjects: 16})
	base := pattern(200, 7) // 4 blocks
	if err := o.Write(1, base); err != nil {
		t.Fatal(err)
	}
	before, _ := o.Stats()
	if err := o.Resize(1, 500); err != nil { // 8 blocks: 4 new
		t.Fatal(err)
	}
	mid, _ := o.Stats()
	if d := mid.Counters["blocks_allocated"] - before.Counters["blocks_allocated"]; d != 4 {
		t.Fatalf("grow allocated %d blocks, want 4", d)
	}
	got, _ := o.Read(1)
	if len(got) != 500 || !bytes.Equal(got[:200], base) {
		t.Fatalf("grown object lost its prefix")
	}
	if err := o.Resize(1, 70); err != nil { // 2 blocks: 6 freed
		t.Fatal(err)
	}
	after, _ := o.Stats()
	if d := after.Counters["blocks_freed"] - mid.Counters["blocks_freed"]; d != 6 {
		t.Fatalf("shrink freed %d blocks, want 6", d)
	}
	if got, _ = o.Read(1); !bytes.Equal(got, base[:70]) {
		t.Fatal("shrunk object lost its prefix")
	}
	if after.LeakedBlocks != 0 || after.LiveBlocks != 2 {
		t.Fatalf("after resizes: %+v", after)
	}
}

func TestPoolFullRollsBack(t *testing.T) {
	o := open(t, Config{BlockSize: 64, MaxBlocks: 8, CapacityBlocks: 20, MaxObjects: 64})
	var err error
	id := uint64(0)
	for ; err == nil; id++ {
		err = o.Write(id, pattern(64*3, 1)) // 3 blocks each: the 7th fails halfway
	}
	if !errors.Is(err, ErrPoolFull) {
		t.Fatalf("got %v, want ErrPoolFull", err)
	}
	st, _ := o.Stats()
	if st.LeakedBlocks != 0 || st.LiveBlocks != 18 {
		t.Fatalf("partial allocation not rolled back: %+v", st)
	}
	if st.Counters["pool_full"] == 0 || st.Counters["rollbacks"] == 0 {
		t.Fatalf("counters: %v", st.Counters)
	}
}

func checksummed(n int, seed uint64) []byte {
	if n < 8 {
		n = 8
	}
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range b[:n-4] {
		b[i] = byte(r.Uint32())
	}
	binary.LittleEndian.PutUint32(b[n-4:], crc32.ChecksumIEEE(b[:n-4]))
	return b
}

func intact(b []byte) bool {
	return len(b) >= 8 && binary.LittleEndian.Uint32(b[len(b)-4:]) == crc32.ChecksumIEEE(b[:len(b)-4])
}

// TestConcurrentWritersReaders: writers and readers on the same few objects
// from several threads; every read is one whole version, and nothing leaks.
func TestConcurrentWritersReaders(t *testing.T) {
	o := open(t, Config{BlockSize: 64, MaxBlocks: 8, CapacityBlocks: 4096, MaxObjects: 64})
	const ids = 4
	for i := uint64(0); i < ids; i++ {
		if err := o.Write(i, checksummed(100, i)); err != nil {
			t.Fatal(err)
		}
	}
	var writes, reads, conflicts, torn atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(2)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for time.Now().Before(deadline) {
				err := o.Write(r.Uint64N(ids), checksummed(8+r.IntN(505), r.Uint64()))
				if errors.Is(err, ErrConflict) {
					conflicts.Add(1)
				} else if err != nil {
					t.Error(err)
					return
				}
				writes.Add(1)
			}
		}(w)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 10))
			for time.Now().Before(deadline) {
				b, err := o.Read(r.Uint64N(ids))
				switch {
				case errors.Is(err, ErrConflict):
					conflicts.Add(1)
				case err != nil:
					t.Error(err)
					return
				case !intact(b):
					torn.Add(1)
				}
				reads.Add(1)
			}
		}(w)
	}
	wg.Wait()
	st, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes, %d reads, %d conflicts, %d torn; kernel torn_retries %d read_failures %d lost_races %d",
		writes.Load(), reads.Load(), conflicts.Load(), torn.Load(),
		st.Counters["torn_retries"], st.Counters["read_failures"], st.Counters["lost_races"])
	if torn.Load() != 0 {
		t.Fatalf("%d torn reads", torn.Load())
	}
	if st.LeakedBlocks != 0 {
		t.Fatalf("leaked %d blocks: %+v", st.LeakedBlocks, st)
	}
	for i := uint64(0); i < ids; i++ {
		o.Free(i)
	}
	if st, _ = o.Stats(); st.LiveBlocks != 0 {
		t.Fatalf("%d blocks live after freeing everything", st.LiveBlocks)
	}
}
