package evict

// Every stub of both directories is built, so a new policy's stubs need no
// go:generate line of their own (internal/bpfobj: objects without bindings).
//go:generate go run ../internal/bpfobj -I ../bpf/include ../bpf/evict/*.bpf.c ../bpf/pagecache/pc_*.bpf.c

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
)

// Policy is a row of the registry: everything the rest of Cistern needs to
// know about an eviction policy. Its code is the header
// bpf/include/cistern/policy/<name>.bpf.h; its objects are built from the
// stubs that include it (docs/eviction.md, "Adding a policy").
type Policy struct {
	Name string
	// Replay is the stem of the object for replay and Kerby-KV,
	// bpf/evict/<Replay>.bpf.c; "" when there is none.
	Replay string
	// PageCache is the stem of the page-cache agent's object,
	// bpf/pagecache/<PageCache>.bpf.c (the policy with pc_apply); "" when
	// there is none.
	PageCache string
	// Accesses: the policy uses accessed(), so the page-cache agent reports
	// reads to it (without, only insertions and deletions).
	Accesses bool
	// FirstRead: the policy counts hits, so the read that brought a folio
	// in must not count as one (pc_skip_first_read, when every read is
	// reported).
	FirstRead bool
	// ScanIDs: the policy takes scanner ids (getscan_scan_ids): the agent's
	// --scan-pid.
	ScanIDs bool
	// NewestFirst: the policy's victims are its newest entries (MRU). The
	// pages cached before the page-cache agent started would be its last,
	// evicted by nobody as long as it has newer ones, so the agent does
	// not seed it (seed.go): the seed's CPU is saved, 1.8 s on the
	// search's tree, which auto's switch spent beside ripgrep's pass.
	NewestFirst bool
	// Periodic: the object defines evict_periodic, work off the hot path
	// (LHD's density rebuild), run after every replay batch, every drain
	// and every page-cache batch.
	Periodic bool
	// Use says who may ask for it by name.
	Use Use
	// Objects holds the objects, <stem>_bpfel.o; nil: this package's
	// (every stub in bpf/evict and bpf/pagecache). A policy of another
	// package brings its own (examples/evictbig).
	Objects fs.FS
}

// Use says who may ask for a policy by name.
type Use uint8

const (
	// Offered: listed in help and accepted.
	Offered Use = iota
	// Unlisted: accepted, not listed ("none", the page-cache overhead
	// bench's policy that decides nothing).
	Unlisted
	// TestOnly: accepted in test binaries only ("broken").
	TestOnly
)

// Kind is which of a policy's objects a caller loads.
type Kind uint8

const (
	// Replay is the object for trace replay and Kerby-KV (evict_replay,
	// evict_drain).
	Replay Kind = iota
	// PageCache is the page-cache agent's object (pc_apply).
	PageCache
)

func (k Kind) String() string {
	if k == PageCache {
		return "page-cache"
	}
	return "replay"
}

// The registry: one row per policy.
var registry = []Policy{
	{Name: "fifo", Replay: "fifo", PageCache: "pc_fifo"},
	{Name: "lru", Replay: "lru", PageCache: "pc_lru", Accesses: true},
	{Name: "mru", Replay: "mru", PageCache: "pc_mru", Accesses: true, NewestFirst: true},
	{Name: "clock", Replay: "clock"},
	{Name: "sieve", Replay: "sieve"},
	{Name: "s3fifo", Replay: "s3fifo", PageCache: "pc_s3fifo", Accesses: true, FirstRead: true},
	{Name: "lfu", Replay: "lfu", PageCache: "pc_lfu", Accesses: true, FirstRead: true},
	{Name: "lhd", Replay: "lhd", PageCache: "pc_lhd", Accesses: true, FirstRead: true, Periodic: true},
	{Name: "wtinylfu", Replay: "wtinylfu", PageCache: "pc_wtinylfu", Accesses: true, FirstRead: true},
	{Name: "get-scan", Replay: "getscan", PageCache: "pc_getscan", Accesses: true, ScanIDs: true},
	// GET-SCAN's scan list alone: the rest is the kernel's (pc_scanonly.bpf.c).
	{Name: "scan-only", PageCache: "pc_scanonly", ScanIDs: true},
	{Name: "none", PageCache: "pc_none", Use: Unlisted},
	{Name: "broken", Replay: "broken", Use: TestOnly},
}

//go:embed *_bpfel.o
var objects embed.FS

var registryMu sync.RWMutex

// Register adds a policy of another package to the registry, for every
// caller that takes a name (Open, replay, the page-cache agent). p.Objects
// must hold the objects it names.
func Register(p Policy) error {
	registryMu.Lock()
	defer registryMu.Unlock()
	if p.Name == "" || p.Objects == nil || (p.Replay == "" && p.PageCache == "") {
		return errors.New("register policy: want a name, objects, and a replay or page-cache object")
	}
	if slices.ContainsFunc(registry, func(q Policy) bool { return q.Name == p.Name }) {
		return fmt.Errorf("register policy %q: the name is taken", p.Name)
	}
	for _, k := range []Kind{Replay, PageCache} {
		if o := p.object(k); o != "" {
			if _, err := fs.Stat(p.Objects, o); err != nil {
				return fmt.Errorf("register policy %q: %w", p.Name, err)
			}
		}
	}
	registry = append(registry, p)
	return nil
}

// Registry returns every row, test-only ones included, in order.
func Registry() []Policy {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Clone(registry)
}

// UnknownPolicyError is Lookup's error: a name that is not a policy with
// an object of Kind.
type UnknownPolicyError struct {
	Name string
	Kind Kind
	Want []string // Names(Kind)
}

func (e *UnknownPolicyError) Error() string {
	return fmt.Sprintf("policy %q: want one of %s", e.Name, strings.Join(e.Want, ", "))
}

// Lookup is the one check of a policy name: the row of name if it has an
// object of kind, else an *UnknownPolicyError.
func Lookup(name string, kind Kind) (Policy, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	for _, p := range registry {
		if p.Name == name && p.object(kind) != "" && (p.Use != TestOnly || testing.Testing()) {
			return p, nil
		}
	}
	return Policy{}, &UnknownPolicyError{Name: name, Kind: kind, Want: names(kind)}
}

// Names are the policies offered with an object of kind, sorted: what help
// texts list.
func Names(kind Kind) []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return names(kind)
}

func names(kind Kind) []string {
	var out []string
	for _, p := range registry {
		if p.Use == Offered && p.object(kind) != "" {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// object is the file name of p's object of kind, "" if it has none.
func (p Policy) object(kind Kind) string {
	stem := p.Replay
	if kind == PageCache {
		stem = p.PageCache
	}
	if stem == "" {
		return ""
	}
	return stem + "_bpfel.o"
}

// Spec returns p's collection spec of kind, unsized (Config.Apply sizes it).
func (p Policy) Spec(kind Kind) (*ebpf.CollectionSpec, error) {
	name := p.object(kind)
	if name == "" {
		return nil, fmt.Errorf("policy %s has no %s object", p.Name, kind)
	}
	fsys := p.Objects
	if fsys == nil {
		fsys = objects
	}
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("policy %s: %s: %w", p.Name, name, err)
	}
	return spec, nil
}

// PeriodicProgram is p's evict_periodic in coll, nil when p has no
// periodic work; an error when the row and the object disagree.
func (p Policy) PeriodicProgram(coll *ebpf.Collection) (*ebpf.Program, error) {
	prog := coll.Programs["evict_periodic"]
	if p.Periodic && prog == nil {
		return nil, fmt.Errorf("policy %s: its row says periodic, its object has no evict_periodic", p.Name)
	}
	if !p.Periodic {
		return nil, nil
	}
	return prog, nil
}
