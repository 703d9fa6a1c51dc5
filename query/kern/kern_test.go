package kern

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestMVSFLoadsEveryTable(t *testing.T) {
	testenv.RequireRoot(t)
	libc, err := filepath.Glob("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil || len(libc) == 0 {
		t.Fatal("no libc.so.6 for the uprobe table")
	}
	for name := range objects {
		for _, emit := range []int{EmitNone, EmitFull} {
			p, err := Load(Config{Object: name, Emit: emit, NeedComm: true, NeedCgroup: true, Binary: libc[0], Symbol: "getpid"})
			if err != nil {
				var ve *ebpf.VerifierError
				if errors.As(err, &ve) {
					t.Fatalf("%s: %+v", name, ve)
				}
				t.Fatalf("%s: %v", name, err)
			}
			time.Sleep(10 * time.Millisecond)
			p.Close()
		}
	}
}

// TestDrainFoldsLateUpdates drives drain over a real per-CPU hash map laid
// out like q_agg (epoch + one key slot, no histogram): what a preempted
// program adds to an epoch after it was read, and an entry it creates there
// after the read, must come out with the next drain, not vanish.
func TestDrainFoldsLateUpdates(t *testing.T) {
	testenv.RequireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 16, ValueSize: 32, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	key := func(epoch, k uint64) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, epoch)
		binary.LittleEndian.PutUint64(b[8:], k)
		return b
	}
	put := func(epoch, k uint64, cpu0 aggSmall) {
		vals := make([]aggSmall, ncpu)
		vals[0] = cpu0
		if err := m.Put(key(epoch, k), vals); err != nil {
			t.Fatal(err)
		}
	}
	p := &Prog{coll: &ebpf.Collection{Maps: map[string]*ebpf.Map{"q_agg": m}}}
	find := func(parts []Partial, k uint64) (n, max uint64) {
		for _, pt := range parts {
			if pt.K[0] == k {
				for _, v := range pt.Per {
					if v.Count > 0 {
						n += v.Count
						max = maxU(max, v.Max)
					}
				}
			}
		}
		return
	}

	put(1, 7, aggSmall{Count: 2, Sum: 30, Min: 10, Max: 20})
	parts, err := p.drain(1)
	if err != nil {
		t.Fatal(err)
	}
	if n, mx := find(parts, 7); n != 2 || mx != 20 {
		t.Fatalf("epoch 1, key 7: %d events, max %d; want 2, 20", n, mx)
	}
	// After the read: a late event of 600 on key 7, and key 9 created in
	// epoch 1; epoch 2 has its own event on key 7.
	put(1, 7, aggSmall{Count: 3, Sum: 630, Min: 10, Max: 600})
	put(1, 9, aggSmall{Count: 1, Sum: 5, Min: 5, Max: 5})
	put(2, 7, aggSmall{Count: 1, Sum: 40, Min: 40, Max: 40})
	if parts, err = p.drain(2); err != nil {
		t.Fatal(err)
	}
	if n, mx := find(parts, 7); n != 2 || mx != 600 {
		t.Errorf("epoch 2, key 7: %d events, max %d; want 2 (one late), 600", n, mx)
	}
	if n, mx := find(parts, 9); n != 1 || mx != 5 {
		t.Errorf("epoch 2, key 9 (created late in epoch 1): %d events, max %d; want 1, 5", n, mx)
	}
	if got := p.LateUpdates(); got != 2 {
		t.Errorf("LateUpdates %d, want 2", got)
	}
	// Epoch 1's entries are gone; epoch 2's stay until the next drain.
	var v []aggSmall
	if err := m.Lookup(key(1, 7), &v); err == nil {
		t.Errorf("epoch 1's entry still in the map after the next drain")
	}
	if err := m.Lookup(key(2, 7), &v); err != nil {
		t.Errorf("epoch 2's entry deleted by its own drain: %v", err)
	}
	if parts, err = p.drain(3); err != nil || len(parts) != 0 {
		t.Errorf("epoch 3 (nothing late): %v, %v", parts, err)
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func TestLateDelta(t *testing.T) {
	o := AggVal{Count: 4, Sum: 100, Min: 10, Max: 40}
	for _, c := range []struct {
		v, want AggVal
		ok      bool
	}{
		{o, AggVal{}, false},
		{AggVal{Count: 5, Sum: 125, Min: 10, Max: 40}, AggVal{Count: 1, Sum: 25, Min: 25, Max: 25}, true},
		{AggVal{Count: 6, Sum: 190, Min: 10, Max: 80}, AggVal{Count: 2, Sum: 90, Min: 45, Max: 80}, true},
		{AggVal{Count: 6, Sum: 112, Min: 2, Max: 40}, AggVal{Count: 2, Sum: 12, Min: 2, Max: 6}, true},
	} {
		got, ok := lateDelta(c.v, o)
		if ok != c.ok || got != c.want {
			t.Errorf("lateDelta(%+v) = %+v %v, want %+v %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

// TestCgroupOnly: only a joined syscalls plan with one cgroup_id = X at
// entry turns other tasks away first; any other clause shape keeps every
// task reaching the filter.
func TestCgroupOnly(t *testing.T) {
	eq := func(vals ...uint64) Clause {
		return Clause{Slot: slotCgroup, Op: OpEQ, Mask: ^uint64(0), Vals: vals, Enter: true}
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want uint64
	}{
		{"one cgroup", Config{Object: "syscalls", Join: true, Clauses: []Clause{{Slot: 6, Op: OpEQ, Mask: ^uint64(0), Vals: []uint64{17}}, eq(42)}}, 42},
		{"IN two cgroups", Config{Object: "syscalls", Join: true, Clauses: []Clause{eq(42, 43)}}, 0},
		{"not equal", Config{Object: "syscalls", Join: true, Clauses: []Clause{{Slot: slotCgroup, Op: OpNE, Mask: ^uint64(0), Vals: []uint64{42}, Enter: true}}}, 0},
		{"no kernel join", Config{Object: "syscalls", Clauses: []Clause{eq(42)}}, 0},
		{"completion in interrupt context", Config{Object: "block_io", Join: true, Clauses: []Clause{eq(42)}}, 0},
		{"no clause", Config{Object: "syscalls", Join: true}, 0},
	} {
		if got := c.cfg.cgroupOnly(); got != c.want {
			t.Errorf("%s: cgroupOnly %d, want %d", c.name, got, c.want)
		}
	}
}

// TestCgroupOnlyFilters loads a joined syscalls plan for this test's own
// cgroup and one for a cgroup id nobody has: the first sees a child's
// syscalls, the second never gets past q_foreign (not even to counting an
// entry), while the machine's other tasks keep making syscalls.
func TestCgroupOnlyFilters(t *testing.T) {
	testenv.RequireRoot(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	_, rel, ok := strings.Cut(strings.TrimSpace(string(b)), "0::")
	if !ok {
		testenv.Missing(t, "cgroup v2 (a 0:: line in /proc/self/cgroup)", "mount cgroup2 at /sys/fs/cgroup")
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join("/sys/fs/cgroup", rel), &st); err != nil {
		t.Fatal(err)
	}
	own := st.Ino // a cgroup v2 id is its directory's inode number
	for _, c := range []struct {
		id   uint64
		seen bool
	}{{own, true}, {own + 1<<40, false}} {
		cfg := Config{Object: "syscalls", Emit: EmitNone, Join: true, NeedCgroup: true,
			Clauses: []Clause{{Slot: slotCgroup, Op: OpEQ, Mask: ^uint64(0), Vals: []uint64{c.id}, Enter: true}}}
		if cfg.cgroupOnly() != c.id {
			t.Fatalf("cgroupOnly %d, want %d", cfg.cgroupOnly(), c.id)
		}
		p, err := Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ { // this process is q_self: a child makes the syscalls
			if err := exec.Command("/bin/true").Run(); err != nil {
				p.Close()
				t.Fatal(err)
			}
		}
		s := p.Stats()
		p.Close()
		if c.seen && (s[StEntries] == 0 || s[StMatched] == 0) {
			t.Errorf("own cgroup %d: %d entries, %d matched; want the children's syscalls", c.id, s[StEntries], s[StMatched])
		}
		if !c.seen && (s[StEntries] != 0 || s[StEvents] != 0) {
			t.Errorf("cgroup %d (nobody's): %d entries, %d events; want none past q_foreign", c.id, s[StEntries], s[StEvents])
		}
	}
}
