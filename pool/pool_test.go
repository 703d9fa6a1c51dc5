package pool

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func openPool(t *testing.T, cfg Config) *Objects {
	t.Helper()
	testenv.RequireRoot(t)
	o, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func stats(t *testing.T, o *Objects) Stats {
	t.Helper()
	st, err := o.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// delta is how much counter name moved from a to b.
func delta(a, b Stats, name string) uint64 { return b.Counters[name] - a.Counters[name] }

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*13) + byte(i>>8)
	}
	return b
}

// checkIdle asserts the invariants of an idle pool: nothing leaked, and the
// block counters agree with the blocks that exist.
func checkIdle(t *testing.T, st Stats) {
	t.Helper()
	if st.LeakedBlocks != 0 {
		t.Errorf("%d blocks leaked (live %d, referenced %d)", st.LeakedBlocks, st.LiveBlocks, st.ReferencedBlocks)
	}
	if live := st.Counters["blocks_allocated"] - st.Counters["blocks_freed"]; live != st.LiveBlocks {
		t.Errorf("counters say %d live blocks (allocated %d - freed %d), pool holds %d",
			live, st.Counters["blocks_allocated"], st.Counters["blocks_freed"], st.LiveBlocks)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{BlockSize: 16, MaxBlocks: 64}, ""},
		{Config{BlockSize: 4096}, ""},
		{Config{BlockSize: 100}, "multiple of 8"},
		{Config{BlockSize: 8}, "from 16 to 4096"},
		{Config{BlockSize: 8192}, "from 16 to 4096"},
		{Config{MaxBlocks: 65}, "1 to 64"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if got := (Config{}).MaxLen(); got != 1024 {
		t.Errorf("default MaxLen %d, want 1024", got)
	}

	spec, err := loadKern()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := CompiledMaxBlocks(spec); err != nil || n != 8 {
		t.Fatalf("CompiledMaxBlocks = %d, %v; want 8", n, err)
	}
	cfg := Config{BlockSize: 64, MaxBlocks: 4, CapacityBlocks: 100, MaxObjects: 10}
	if err := cfg.Apply(spec); err != nil {
		t.Fatal(err)
	}
	var bs, mb uint32
	spec.Variables["pool_block_size"].Get(&bs)
	spec.Variables["pool_max_blocks"].Get(&mb)
	m := spec.Maps
	if bs != 64 || mb != 4 || m["pool_blocks"].MaxEntries != 100 || m["pool_blocks"].ValueSize != 80 ||
		m["pool_zero"].ValueSize != 80 || m["pool_objects"].MaxEntries != 10 || m["pool_staging"].ValueSize != 64*8 {
		t.Errorf("Apply: bs %d mb %d blocks %d/%d zero %d objects %d staging %d", bs, mb,
			m["pool_blocks"].MaxEntries, m["pool_blocks"].ValueSize, m["pool_zero"].ValueSize,
			m["pool_objects"].MaxEntries, m["pool_staging"].ValueSize)
	}
	if err := (Config{MaxBlocks: 9}).Apply(spec); err == nil || !strings.Contains(err.Error(), "CISTERN_POOL_MAX_BLOCKS 8") {
		t.Errorf("MaxBlocks over the compile-time cap: %v", err)
	}
	// A spec without the pool (Kerby-KV has no pool_objects/pool_staging:
	// missing maps are skipped, but a missing pool_ref is an error).
	delete(spec.Maps, "pool_objects")
	delete(spec.Maps, "pool_staging")
	if err := (Config{}).Apply(spec); err != nil {
		t.Errorf("Apply without the generic maps: %v", err)
	}
	spec.Types = nil
	if err := (Config{}).Apply(spec); err == nil {
		t.Error("Apply on a spec without BTF succeeded")
	}
}

func TestParseRef(t *testing.T) {
	b := make([]byte, RefSize(8))
	copy(b, []byte{1, 0, 0, 0, 0, 0, 0, 0, 200, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6})
	r, err := ParseRef(b, 8)
	if err != nil || r.Ver != 1 || r.Len != 200 || r.NBlocks != 2 || r.Idx[0] != 5 || r.Idx[1] != 6 {
		t.Fatalf("ParseRef = %+v, %v", r, err)
	}
	if RefSize(8) != 80 {
		t.Fatalf("RefSize(8) = %d", RefSize(8))
	}
	if _, err := ParseRef(b[:40], 8); err == nil {
		t.Error("short buffer accepted")
	}
	b[12] = 9
	if _, err := ParseRef(b, 8); err == nil {
		t.Error("9 blocks accepted with a cap of 8")
	}
}

func TestRoundTrip(t *testing.T) {
	const bs = 128
	o := openPool(t, Config{BlockSize: bs, MaxBlocks: 8, CapacityBlocks: 1024, MaxObjects: 64})
	max := int(o.MaxLen())
	lengths := []int{0, 1, bs - 1, bs, bs + 1, max - 1, max}
	var payload, blocks uint64
	for i, n := range lengths {
		want := pattern(n, byte(i+1))
		if err := o.Write(uint64(i), want); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		got, err := o.Read(uint64(i))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes: %v (%d bytes back)", n, err, len(got))
		}
		payload += uint64(n)
		blocks += uint64((n + bs - 1) / bs)
	}
	// Overwrite with a shorter and a longer value.
	for _, n := range []int{3, 700} {
		want := pattern(n, 9)
		if err := o.Write(1, want); err != nil {
			t.Fatal(err)
		}
		if got, err := o.Read(1); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("overwrite with %d bytes: %v", n, err)
		}
	}
	payload += 700 - 1
	blocks += 6 - 1

	before := stats(t, o)
	if err := o.Write(99, pattern(max+1, 1)); !errors.Is(err, ErrTooBig) {
		t.Fatalf("%d bytes: %v, want ErrTooBig", max+1, err)
	}
	if _, err := o.Read(99); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused write created the object: %v", err)
	}
	if _, err := o.Read(12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read absent: %v", err)
	}
	if err := o.Free(12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("free absent: %v", err)
	}
	st := stats(t, o)
	if d := delta(before, st, "oversize"); d != 1 {
		t.Errorf("oversize counted %d times, want 1", d)
	}
	if st.Objects != uint64(len(lengths)) || st.PayloadBytes != payload || st.LiveBlocks != blocks || st.BlockSize != bs {
		t.Errorf("stats %+v; want %d objects, %d bytes, %d blocks", st, len(lengths), payload, blocks)
	}
	if want := float64(payload) / float64(blocks*bs); st.MemoryEfficiency != want {
		t.Errorf("efficiency %v, want %v", st.MemoryEfficiency, want)
	}
	if st.IndicesIssued < blocks || st.Versions < uint64(len(lengths)+2) {
		t.Errorf("index counters: %d indices, %d versions", st.IndicesIssued, st.Versions)
	}
	checkIdle(t, st)
	t.Logf("%d objects, %d payload bytes in %d blocks of %d: efficiency %.3f", st.Objects, st.PayloadBytes, st.LiveBlocks, bs, st.MemoryEfficiency)

	for i := range lengths {
		if err := o.Free(uint64(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Read(uint64(i)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("read after free: %v", err)
		}
	}
	st = stats(t, o)
	if st.LiveBlocks != 0 || st.Objects != 0 || st.MemoryEfficiency != 0 {
		t.Fatalf("after freeing everything: %+v", st)
	}
	checkIdle(t, st)
}

func TestResize(t *testing.T) {
	const bs = 64
	o := openPool(t, Config{BlockSize: bs, MaxBlocks: 8, CapacityBlocks: 256, MaxObjects: 16})
	base := pattern(200, 7) // 4 blocks
	if err := o.Write(1, base); err != nil {
		t.Fatal(err)
	}
	step := func(n uint32, alloc, freed uint64) []byte {
		t.Helper()
		before := stats(t, o)
		if err := o.Resize(1, n); err != nil {
			t.Fatalf("resize to %d: %v", n, err)
		}
		after := stats(t, o)
		if a, f := delta(before, after, "blocks_allocated"), delta(before, after, "blocks_freed"); a != alloc || f != freed {
			t.Errorf("resize to %d: %d blocks allocated, %d freed; want %d and %d", n, a, f, alloc, freed)
		}
		if want := uint64((n + bs - 1) / bs); after.LiveBlocks != want {
			t.Errorf("resize to %d: %d live blocks, want %d", n, after.LiveBlocks, want)
		}
		checkIdle(t, after)
		got, err := o.Read(1)
		if err != nil || len(got) != int(n) {
			t.Fatalf("read after resize to %d: %d bytes, %v", n, len(got), err)
		}
		return got
	}
	got := step(500, 4, 0) // 4 -> 8 blocks
	if !bytes.Equal(got[:200], base) || !bytes.Equal(got[200:], make([]byte, 300)) {
		t.Error("grow: prefix lost or new bytes not zero")
	}
	if got = step(70, 0, 6); !bytes.Equal(got, base[:70]) { // 8 -> 2 blocks
		t.Error("shrink: prefix lost")
	}
	if got = step(100, 0, 0); !bytes.Equal(got[:70], base[:70]) { // same 2 blocks
		t.Error("resize within the last block: prefix lost")
	}
	step(0, 0, 2)
	if got = step(130, 3, 0); !bytes.Equal(got, make([]byte, 130)) {
		t.Error("grow from empty: not zero")
	}

	before := stats(t, o)
	for _, n := range []uint32{8*bs + 1, math.MaxUint32, math.MaxUint32 - bs + 2} {
		// The last two once wrapped around in the block count and passed.
		if err := o.Resize(1, n); !errors.Is(err, ErrTooBig) {
			t.Errorf("resize to %d: %v, want ErrTooBig", n, err)
		}
	}
	if d := delta(before, stats(t, o), "oversize"); d != 3 {
		t.Errorf("oversize counted %d, want 3", d)
	}
	if err := o.Resize(2, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("resize absent: %v", err)
	}
}

func TestPoolFull(t *testing.T) {
	const bs, capacity = 64, 64
	o := openPool(t, Config{BlockSize: bs, MaxBlocks: 8, CapacityBlocks: capacity, MaxObjects: 64})
	var id uint64
	var err error
	for ; ; id++ {
		if err = o.Write(id, pattern(3*bs, byte(id))); err != nil {
			break // 21 objects of 3 blocks fit; the 22nd fails after 1 block
		}
	}
	if !errors.Is(err, ErrPoolFull) || id != capacity/3 {
		t.Fatalf("write %d: %v; want ErrPoolFull at object %d", id, err, capacity/3)
	}
	before := stats(t, o)
	if before.LiveBlocks != 3*id || before.Counters["pool_full"] != 1 || before.Counters["rollbacks"] != 1 {
		t.Errorf("after the first failure: %+v", before)
	}
	checkIdle(t, before)

	// An 8-block write gets 1 block, fails and gives it back; an overwrite
	// that does not fit leaves the old value alone.
	if err := o.Write(100, pattern(8*bs, 1)); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("8-block write in a full pool: %v", err)
	}
	if err := o.Write(0, pattern(2*bs, 2)); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("overwrite in a full pool: %v", err)
	}
	if got, err := o.Read(0); err != nil || !bytes.Equal(got, pattern(3*bs, 0)) {
		t.Fatalf("failed overwrite changed the object: %v", err)
	}
	after := stats(t, o)
	if d := delta(before, after, "pool_full"); d != 2 {
		t.Errorf("pool_full moved by %d, want 2", d)
	}
	if d := delta(before, after, "rollbacks"); d != 2 {
		t.Errorf("rollbacks moved by %d, want 2", d)
	}
	if after.LiveBlocks != before.LiveBlocks {
		t.Errorf("failed writes left %d blocks behind", after.LiveBlocks-before.LiveBlocks)
	}
	checkIdle(t, after)

	if err := o.Free(5); err != nil {
		t.Fatal(err)
	}
	if err := o.Write(100, pattern(4*bs, 1)); err != nil {
		t.Fatalf("write after a free: %v", err)
	}
	checkIdle(t, stats(t, o))
}

func TestObjectsFull(t *testing.T) {
	o := openPool(t, Config{BlockSize: 64, MaxBlocks: 8, CapacityBlocks: 256, MaxObjects: 4})
	for id := uint64(0); id < 4; id++ {
		if err := o.Write(id, pattern(100, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Write(4, pattern(100, 1)); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("5th object in a map of 4: %v", err)
	}
	st := stats(t, o)
	if st.Counters["objects_full"] != 1 || st.Objects != 4 {
		t.Errorf("stats %+v", st)
	}
	checkIdle(t, st)
}

func TestPinned(t *testing.T) {
	a := openPool(t, Config{BlockSize: 32, MaxBlocks: 6, CapacityBlocks: 128, MaxObjects: 16})
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("cistern-pool-test-%d", os.Getpid()))
	if err := a.Pin(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Unpin(); os.Remove(dir) })
	b, err := OpenPinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Config() != a.Config() {
		t.Fatalf("pinned config %+v, want %+v", b.Config(), a.Config())
	}
	want := pattern(150, 3)
	if err := a.Write(7, want); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Read(7); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the pinned pool: %v", err)
	}
	if err := b.Write(7, pattern(32*6+1, 1)); !errors.Is(err, ErrTooBig) {
		t.Fatalf("pinned pool has another max length: %v", err)
	}
	if err := b.Free(7); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(7); !errors.Is(err, ErrNotFound) {
		t.Fatalf("free through the pinned pool not seen: %v", err)
	}
	sa, sb := stats(t, a), stats(t, b)
	if sa.Counters["blocks_allocated"] != 5 || sb.Counters["blocks_freed"] != 5 || sa.Counters["oversize"] != 1 {
		t.Errorf("counters not shared: %v / %v", sa.Counters, sb.Counters)
	}
}

// TestScratchBusy: a call that finds its CPU's scratch owned by another (a
// preempted caller) gets -EBUSY, is counted, and Objects retries then gives
// up with ErrConflict; once released, calls work again.
func TestScratchBusy(t *testing.T) {
	o := openPool(t, Config{BlockSize: 64, CapacityBlocks: 64, MaxObjects: 8})
	set := func(busy uint32) {
		t.Helper()
		n, err := ebpf.PossibleCPU()
		if err != nil {
			t.Fatal(err)
		}
		v := make([]kernPoolScratch, n)
		for i := range v {
			v[i].Busy = busy
		}
		if err := o.objs.PoolScratchMap.Update(uint32(0), v, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	set(1)
	if err := o.Write(1, pattern(10, 1)); !errors.Is(err, ErrConflict) {
		t.Fatalf("write with the scratch taken: %v", err)
	}
	st := stats(t, o)
	if st.Counters["scratch_busy"] != busyRetries+1 || st.LiveBlocks != 0 {
		t.Errorf("scratch_busy %d (want %d), %d live blocks", st.Counters["scratch_busy"], busyRetries+1, st.LiveBlocks)
	}
	set(0)
	if err := o.Write(1, pattern(10, 1)); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Read(1); err != nil || !bytes.Equal(got, pattern(10, 1)) {
		t.Fatalf("read after release: %v", err)
	}
}

// TestNonPowerOfTwoMaxBlocks builds pool.bpf.c with CISTERN_POOL_MAX_BLOCKS
// 6: resize once kept the dropped blocks with a power-of-two mask, which
// folded 6 indices onto 4 slots and leaked blocks.
func TestNonPowerOfTwoMaxBlocks(t *testing.T) {
	testenv.RequireRoot(t)
	clang := testenv.NeedTool(t, "clang-19", "clang-19") // builds pool.bpf.c with CISTERN_POOL_MAX_BLOCKS=6
	obj := filepath.Join(t.TempDir(), "pool6.o")
	// vmlinux.h first: the tree's copy exists only after `make generate`.
	out, err := exec.Command(clang, "-O2", "-g", "-Wall", "-mcpu=v3", "-I"+testenv.VmlinuxInclude(t), "-I../bpf/include", "-target", "bpfel",
		"-DCISTERN_POOL_MAX_BLOCKS=6", "-c", "../bpf/pool/pool.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("clang: %v\n%s", err, out)
	}
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := CompiledMaxBlocks(spec); n != 6 || err != nil {
		t.Fatalf("CompiledMaxBlocks = %d, %v", n, err)
	}
	o, err := openSpec(spec, Config{BlockSize: 64, CapacityBlocks: 256, MaxObjects: 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Config().MaxBlocks != 6 || o.MaxLen() != 384 {
		t.Fatalf("config %+v", o.Config())
	}
	for i := range 3 {
		if err := o.Write(1, pattern(384, byte(i))); err != nil {
			t.Fatal(err)
		}
		before := stats(t, o)
		if err := o.Resize(1, 10); err != nil { // drops blocks 1..5
			t.Fatal(err)
		}
		if d := delta(before, stats(t, o), "blocks_freed"); d != 5 {
			t.Errorf("shrinking 6 blocks to 1 freed %d", d)
		}
		if got, err := o.Read(1); err != nil || !bytes.Equal(got, pattern(10, byte(i))) {
			t.Fatalf("read after shrink: %v", err)
		}
	}
	checkIdle(t, stats(t, o))
}
