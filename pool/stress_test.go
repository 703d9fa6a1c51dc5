package pool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// Values of the stress test check themselves, and stay checkable through
// resizes. A long value (>= 16 bytes) is [seed u64][mix(seed) u64] then
// body(seed, j) for each byte j >= 16; a short one is short(j). Neither
// generator yields 0. Blocks are immutable and start zeroed, so every
// version of an object, written then resized any number of times (to 16
// bytes or more), reads as the generator's bytes up to some point and zeros
// after it. A read that mixes versions breaks that: another seed's bytes do
// not match, and zeros are never followed by data.

func mix(x uint64) uint64 { // splitmix64 finalizer
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func bodyByte(seed uint64, j int) byte {
	return byte(mix(seed+uint64(j/8))>>(8*(j%8))) | 1
}

func shortByte(j int) byte { return byte(j*29+7) | 1 }

func makeValue(n int, seed uint64) []byte {
	b := make([]byte, n)
	if n < 16 {
		for j := range b {
			b[j] = shortByte(j)
		}
		return b
	}
	binary.LittleEndian.PutUint64(b, seed)
	binary.LittleEndian.PutUint64(b[8:], mix(seed))
	for j := 16; j < n; j++ {
		b[j] = bodyByte(seed, j)
	}
	return b
}

// verify says why b is not one version of one value, or "".
func verify(b []byte) string {
	gen := shortByte
	if len(b) >= 16 && binary.LittleEndian.Uint64(b[8:]) == mix(binary.LittleEndian.Uint64(b)) {
		seed := binary.LittleEndian.Uint64(b)
		gen = func(j int) byte {
			if j < 16 {
				return b[j]
			}
			return bodyByte(seed, j)
		}
	}
	j := 0
	for j < len(b) && b[j] == gen(j) {
		j++
	}
	for k := j; k < len(b); k++ {
		if b[k] != 0 {
			return fmt.Sprintf("byte %d of %d is %#x, want %#x or a zero tail from byte %d", k, len(b), b[k], gen(k), j)
		}
	}
	return ""
}

func TestValueCheck(t *testing.T) {
	for _, n := range []int{1, 15, 16, 17, 300, 1024} {
		v := makeValue(n, uint64(n)*77)
		if why := verify(v); why != "" {
			t.Fatalf("%d bytes: %s", n, why)
		}
		if n > 20 {
			w := append([]byte(nil), v...)
			copy(w[n/2:], makeValue(n, 5)[n/2:]) // two versions spliced
			if verify(w) == "" {
				t.Fatalf("%d bytes: a spliced value passed", n)
			}
			w = append(v[:n-10:n-10], make([]byte, 10)...) // resized: zero tail
			if why := verify(w); why != "" {
				t.Fatalf("%d bytes with a zero tail: %s", n, why)
			}
			w[n-12] = 0 // a zero inside the data
			if verify(w) == "" {
				t.Fatal("a hole in the data passed")
			}
		}
	}
}

type stressCounts struct {
	writes, reads, resizes, frees   atomic.Int64
	readConflicts, writeConflicts   atomic.Int64
	notFound, torn, unexpectedError atomic.Int64
}

// TestConcurrentStress: writers, resizers and freers against readers on the
// same few objects from 8 goroutines (on 2 CPUs the pool programs really
// interleave). Every successful read must be one whole version; conflicts
// are allowed and counted; when idle nothing has leaked, and after freeing
// everything no block is left.
func TestConcurrentStress(t *testing.T) {
	const bs, ids = 256, 3
	o := openPool(t, Config{BlockSize: bs, MaxBlocks: 8, CapacityBlocks: 4096, MaxObjects: 64})
	max := int(o.MaxLen())
	dur := 3 * time.Second
	if testing.Short() {
		dur = 500 * time.Millisecond * testenv.TimeScale() // enough operations under TCG too
	}
	var c stressCounts
	fail := func(format string, args ...any) {
		if c.unexpectedError.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { // writer: 80% writes, 12% resizes, 8% frees
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(deadline) {
				id := r.Uint64N(ids)
				var err error
				switch p := r.IntN(100); {
				case p < 80:
					err = o.Write(id, makeValue(1+r.IntN(max), r.Uint64()))
					c.writes.Add(1)
				case p < 92:
					err = o.Resize(id, uint32(16+r.IntN(max-15)))
					c.resizes.Add(1)
				default:
					err = o.Free(id)
					c.frees.Add(1)
				}
				switch {
				case err == nil:
				case errors.Is(err, ErrConflict):
					c.writeConflicts.Add(1)
				case errors.Is(err, ErrNotFound):
					c.notFound.Add(1)
				default:
					fail("writer: %v", err)
				}
			}
		})
		wg.Go(func() { // reader
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for time.Now().Before(deadline) {
				b, err := o.Read(r.Uint64N(ids))
				c.reads.Add(1)
				switch {
				case errors.Is(err, ErrConflict):
					c.readConflicts.Add(1)
				case errors.Is(err, ErrNotFound):
					c.notFound.Add(1)
				case err != nil:
					fail("reader: %v", err)
				default:
					if why := verify(b); why != "" {
						if c.torn.Add(1) <= 5 {
							t.Errorf("torn read: %s", why)
						}
					}
				}
			}
		})
	}
	wg.Wait()

	st := stats(t, o)
	ops := c.writes.Load() + c.reads.Load() + c.resizes.Load() + c.frees.Load()
	t.Logf("%.1fs: %d ops (%d writes, %d resizes, %d frees, %d reads); torn reads %d; conflicts: %d reads, %d writes/resizes; not found %d",
		dur.Seconds(), ops, c.writes.Load(), c.resizes.Load(), c.frees.Load(), c.reads.Load(), c.torn.Load(),
		c.readConflicts.Load(), c.writeConflicts.Load(), c.notFound.Load())
	t.Logf("kernel: torn_retries %d, read_failures %d, lost_races %d, scratch_busy %d; idle: %d objects, %d live blocks, %d leaked",
		st.Counters["torn_retries"], st.Counters["read_failures"], st.Counters["lost_races"], st.Counters["scratch_busy"],
		st.Objects, st.LiveBlocks, st.LeakedBlocks)
	if c.torn.Load() != 0 {
		t.Errorf("%d torn reads", c.torn.Load())
	}
	if c.reads.Load() < 1000 || c.writes.Load() < 1000 {
		t.Errorf("too few operations to mean anything")
	}
	checkIdle(t, st)
	for id := range uint64(ids) {
		if err := o.Free(id); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	st = stats(t, o)
	if st.LiveBlocks != 0 || st.Objects != 0 {
		t.Errorf("after freeing everything: %d blocks, %d objects", st.LiveBlocks, st.Objects)
	}
	checkIdle(t, st)
}

// TestConcurrentPoolFull: writers and freers race for a pool too small for
// all of them; every failed write rolls back, so nothing leaks.
func TestConcurrentPoolFull(t *testing.T) {
	const bs = 32
	o := openPool(t, Config{BlockSize: bs, MaxBlocks: 8, CapacityBlocks: 40, MaxObjects: 64})
	max := int(o.MaxLen())
	var full, ok, torn atomic.Int64
	// At least 500 ms, and on until the pool has filled and 100 writes
	// succeeded (an emulated guest runs ~10x slower), within a bound.
	start := time.Now()
	running := func() bool {
		el := time.Since(start)
		return el < 500*time.Millisecond || (el < 500*time.Millisecond*testenv.TimeScale()*4 && (full.Load() == 0 || ok.Load() < 100))
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for running() {
				id := r.Uint64N(16)
				if w%3 == 2 {
					if b, err := o.Read(id); err == nil && verify(b) != "" {
						torn.Add(1)
					}
					continue
				}
				if r.IntN(4) == 0 {
					if err := o.Free(id); err != nil && !errors.Is(err, ErrNotFound) {
						t.Error(err)
						return
					}
					continue
				}
				err := o.Write(id, makeValue(1+r.IntN(max), r.Uint64()))
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrPoolFull):
					full.Add(1)
				case !errors.Is(err, ErrConflict):
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := stats(t, o)
	t.Logf("%d writes done, %d refused (pool full), %d torn; pool_full %d, rollbacks %d; %d/%d blocks live, %d leaked",
		ok.Load(), full.Load(), torn.Load(), st.Counters["pool_full"], st.Counters["rollbacks"], st.LiveBlocks, st.CapacityBlocks, st.LeakedBlocks)
	if full.Load() == 0 || st.Counters["rollbacks"] == 0 || ok.Load() < 100 {
		t.Error("the pool never filled, or never drained")
	}
	if torn.Load() != 0 {
		t.Errorf("%d torn reads", torn.Load())
	}
	checkIdle(t, st)
}
