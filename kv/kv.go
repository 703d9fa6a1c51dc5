// Package kv is Kerby-KV: memcached GETs answered at XDP from values kept in
// a Kerby pool (package pool, bpf/include/cistern/pool.bpf.h), with memcached
// as the source of truth. bpf/kv/kv.bpf.c documents the data path and the
// consistency argument; this package loads, configures, attaches and reads it.
package kv

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -no-global-types kern ../bpf/kv/kv.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include -DCISTERN_POOL_MAX_BLOCKS=64" -target bpfel -no-global-types kern64 ../bpf/kv/kv.bpf.c

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/internal/tc"
	"github.com/cistern-ebpf/cistern/kernel"
	"github.com/cistern-ebpf/cistern/pool"
)

// Modes of the in-kernel value store.
const (
	ModeKerby = "kerby" // values as chains of pool blocks
	ModeFixed = "fixed" // one slot per key, as BMC and DINT: a pool of 1-block objects
)

// kv.bpf.c is built twice: with struct pool_ref sized for 8 blocks (the
// default, smaller entries) and for 64.
const (
	smallBuildBlocks = 8
	MaxBlocksLimit   = 64
)

// Config configures Kerby-KV.
type Config struct {
	Mode       string // ModeKerby or ModeFixed
	BlockSize  uint32 // kerby block size (default 128)
	MaxBlocks  uint32 // kerby blocks per value (default 8)
	SlotSize   uint32 // fixed slot size (default 128)
	PoolMB     uint32 // payload capacity in MiB (default 256)
	MaxObjects uint32 // allocation-map entries (default: one per pool block, at most 4M)
	Port       uint16 // memcached port (default 11211)
	// Two writes to one key closer than this invalidate it instead of
	// updating it: memcached may apply them in either order.
	WriteWindow time.Duration // default 1ms
	// A GET reply is not stored within this long after a write to its key:
	// memcached may have answered the GET before applying the write.
	FillQuarantine time.Duration // default 50ms
	// Values filled from GET replies expire after this long (0: never);
	// memcached does not say an item's expiry in its replies.
	FillTTL time.Duration
	// Policy names an eviction policy of package evict ("": the built-in
	// FIFO ring). Its drainer must run: Server.StartDrainer or Drain.
	Policy string
	// NoTCP leaves memcached's TCP connections to memcached (their writes
	// still invalidate); by default GETs on them are answered in the
	// kernel where it can (kernel feature sockmap_verdict).
	NoTCP bool
}

func (c *Config) defaults() {
	if c.Mode == "" {
		c.Mode = ModeKerby
	}
	if c.BlockSize == 0 {
		c.BlockSize = 128
	}
	if c.MaxBlocks == 0 {
		c.MaxBlocks = 8
	}
	if c.SlotSize == 0 {
		c.SlotSize = 128
	}
	if c.PoolMB == 0 {
		c.PoolMB = 256
	}
	if c.Port == 0 {
		c.Port = 11211
	}
	if c.WriteWindow == 0 {
		c.WriteWindow = time.Millisecond
	}
	if c.FillQuarantine == 0 {
		c.FillQuarantine = 50 * time.Millisecond
	}
}

// PoolConfig is the pool behind the mode: kerby chains BlockSize blocks,
// fixed stores each value in one SlotSize block.
func (c Config) PoolConfig() pool.Config {
	c.defaults()
	bs, mb := c.BlockSize, c.MaxBlocks
	if c.Mode == ModeFixed {
		bs, mb = c.SlotSize, 1
	}
	capBlocks := uint32(uint64(c.PoolMB) << 20 / uint64(bs))
	objs := c.MaxObjects
	if objs == 0 {
		objs = min(capBlocks, 4<<20)
	}
	return pool.Config{BlockSize: bs, MaxBlocks: mb, CapacityBlocks: capBlocks, MaxObjects: objs}
}

// Validate reports a configuration error in words a user can act on.
func (c Config) Validate() error {
	c.defaults()
	switch c.Mode {
	case ModeKerby:
		if c.MaxBlocks > MaxBlocksLimit {
			return fmt.Errorf("--max-blocks %d: this build chains at most %d blocks per value", c.MaxBlocks, MaxBlocksLimit)
		}
	case ModeFixed:
	default:
		return fmt.Errorf("--mode %q: want kerby or fixed", c.Mode)
	}
	pc := c.PoolConfig()
	if err := pc.Validate(); err != nil {
		return err
	}
	if c.Policy != "" {
		if _, err := evict.Lookup(c.Policy, evict.Replay); err != nil {
			return fmt.Errorf("--%w", err)
		}
	}
	if pc.CapacityBlocks < 16 {
		return fmt.Errorf("--pool-mb %d holds only %d blocks", c.PoolMB, pc.CapacityBlocks)
	}
	return nil
}

// Server is a loaded Kerby-KV instance.
type Server struct {
	Cfg   Config
	objs  kernObjects
	links []io.Closer // XDP link, then the tc attachments
	// XDPMode is "native" or "generic" once attached; XDPReason says why.
	XDPMode   string
	XDPReason string
	// TCMode is how kv_ingress and kv_egress were attached, from package
	// kernel: "tcx", or "cls_bpf (TCX needs Linux 6.6)".
	TCMode string
	// TCPMode says whether TCP GETs are answered in the kernel: "sockmap",
	// or "off: why".
	TCPMode    string
	tcp        *tcpPath
	tcpRefused error // the kernel refused the TCP programs: loaded without them
	// StaleTC counts cls_bpf filters of Kerby-KV's programs that Attach
	// removed first: left on the interface by a serve that was killed.
	StaleTC int
	// Link is the interface Attach inspected (kind, veth peer).
	Link      LinkInfo
	pinned    string
	policy    *policyState // --policy, else nil
	driver    *driverStats // the interface's drop counters, after Attach
	driverMap *ebpf.Map    // where PublishDriverCounters writes them, after Pin
}

// Policies are the names Config.Policy accepts.
func Policies() []string { return evict.Names(evict.Replay) }

// Load configures and loads the BPF objects; nothing is attached yet.
func Load(cfg Config) (*Server, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return load(cfg, cfg.PoolConfig())
}

// loadWithCapacity is Load with an exact pool size in blocks (tests).
func loadWithCapacity(cfg Config, blocks uint32) (*Server, error) {
	pc := cfg.PoolConfig()
	pc.CapacityBlocks = blocks
	return load(cfg, pc)
}

// tsoArch is 1 where loads are not reordered with each other (x86-64):
// GETs then read an entry's version stamp with plain loads (kv.bpf.c,
// stamp_read); elsewhere with atomic ones.
func tsoArch() uint32 {
	if runtime.GOARCH == "amd64" {
		return 1
	}
	return 0
}

func load(cfg Config, pc pool.Config) (*Server, error) {
	load := loadKern
	if pc.MaxBlocks > smallBuildBlocks {
		load = loadKern64
	}
	spec, err := load()
	if err != nil {
		return nil, err
	}
	if err := pc.Apply(spec); err != nil {
		return nil, err
	}
	ring := uint32(1) << bits.Len32(pc.MaxObjects-1) // FIFO ring: next power of two
	spec.Maps["kv_fifo"].MaxEntries = ring
	spec.Maps["kv_entries"].MaxEntries = pc.MaxObjects
	for name, v := range map[string]any{
		"kv_port":               cfg.Port,
		"kv_write_window_ns":    uint64(cfg.WriteWindow),
		"kv_fill_quarantine_ns": uint64(cfg.FillQuarantine),
		"kv_fill_ttl_ns":        uint64(cfg.FillTTL),
		"kv_fifo_mask":          ring - 1,
		"kv_policy_on":          uint32(min(len(cfg.Policy), 1)),
		"kv_tso":                tsoArch(),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	s := &Server{Cfg: cfg}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		// The TCP path (tcp.bpf.h) is the part a kernel's verifier is
		// likeliest to refuse: without it Kerby-KV still serves UDP, and
		// TCP GETs go to memcached (TCPMode says why).
		tcpErr := kernel.LoadError("Kerby-KV's TCP path", err)
		if err := loadWithoutTCP(spec, &s.objs); err != nil {
			return nil, kernel.LoadError("Kerby-KV", err)
		}
		s.tcpRefused = tcpErr
	}
	if cfg.Policy != "" {
		blocks, objects := policyBudget(pc.CapacityBlocks, pc.MaxObjects, pc.MaxBlocks)
		if err := s.openPolicy(cfg.Policy, blocks, objects); err != nil {
			s.objs.Close()
			return nil, err
		}
	}
	return s, nil
}

// Attach puts the XDP program on ifindex, the big-reply path on its tc
// ingress and the fill program on its tc egress (TCX links, or cls_bpf
// filters where the kernel has no TCX: tc.Attach, TCMode says which);
// it runs in the interface's network namespace. mode is XDPAuto (generic on a veth, else
// native when the driver supports it, else generic), XDPNative (no
// fallback; on a veth the caller checks the peer first, see
// VethPeer.Delivers) or XDPGeneric. XDPMode and XDPReason say what was
// chosen and why.
func (s *Server) Attach(ifindex int, mode XDPMode) error {
	if mode == "" {
		mode = XDPAuto
	}
	li, err := InspectLink(ifindex)
	if err != nil {
		return err
	}
	s.Link = li
	native := func() (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: s.objs.KvXdp, Interface: ifindex, Flags: link.XDPDriverMode})
	}
	generic := func() (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: s.objs.KvXdp, Interface: ifindex, Flags: link.XDPGenericMode})
	}
	var l link.Link
	switch mode {
	case XDPGeneric:
		l, err = generic()
		s.XDPMode, s.XDPReason = "generic", "asked for"
	case XDPNative:
		l, err = native()
		s.XDPMode, s.XDPReason = "native", "asked for"
		if err != nil {
			return fmt.Errorf("attach native XDP to %s: %w (use --xdp-mode generic)", li.Name, err)
		}
	case XDPAuto:
		if li.Kind == "veth" {
			l, err = generic()
			s.XDPMode, s.XDPReason = "generic", "auto: a veth delivers native XDP_TX replies only to a peer that runs an XDP program"
			break
		}
		l, err = native()
		s.XDPMode, s.XDPReason = "native", "auto"
		if err != nil {
			s.XDPMode, s.XDPReason = "generic", fmt.Sprintf("auto: native XDP failed: %v", err)
			l, err = generic()
		}
	default:
		_, err := ParseXDPMode(string(mode))
		return err
	}
	if err != nil {
		return fmt.Errorf("attach XDP to %s: %w", li.Name, err)
	}
	s.links = append(s.links, l)
	s.TCMode = tc.Mode()
	for _, t := range []struct {
		prog *ebpf.Program
		dir  tc.Direction
	}{{s.objs.KvIngress, tc.Ingress}, {s.objs.KvEgress, tc.Egress}} {
		tl, err := tc.Attach(t.prog, ifindex, t.dir)
		if err != nil {
			s.detach()
			return fmt.Errorf("attach tc %s program to %s (%s): %w", t.dir, li.Name, s.TCMode, err)
		}
		s.links = append(s.links, tl)
		s.StaleTC += tl.Stale
	}
	if s.driver, err = openDriverStats(ifindex); err != nil {
		s.detach()
		return err
	}
	if s.Cfg.NoTCP {
		s.TCPMode = "off: asked for"
	} else if err := s.attachTCP(); err != nil {
		s.detach()
		return err
	}
	return nil
}

// detach undoes Attach (the tc attachments first).
func (s *Server) detach() error {
	errs := []error{s.tcp.close()}
	s.tcp = nil
	for i := len(s.links) - 1; i >= 0; i-- {
		errs = append(errs, s.links[i].Close())
	}
	s.links = nil
	return errors.Join(errs...)
}

// Detach undoes Attach but keeps the maps and their values, so that the
// server can be attached again (the bench swaps modes on one interface).
// Run it in the interface's network namespace.
func (s *Server) Detach() error {
	err := s.detach()
	s.driver.close()
	s.driver = nil
	return err
}

// AttachPeerPass puts an XDP_PASS program on the client side of a veth pair,
// which native XDP_TX on the server side needs to deliver its frames.
func (s *Server) AttachPeerPass(ifindex int) (link.Link, error) {
	return link.AttachXDP(link.XDPOptions{Program: s.objs.KvXdpPass, Interface: ifindex, Flags: link.XDPDriverMode})
}

// Programs exposes the programs for BPF_PROG_TEST_RUN in tests.
func (s *Server) Programs() (xdp, egress *ebpf.Program) { return s.objs.KvXdp, s.objs.KvEgress }

// Pin pins the maps under dir so `cistern kv stats` can read them.
func (s *Server) Pin(dir string) error {
	if err := mounts.PinDir(dir); err != nil {
		return err
	}
	if s.driverMap == nil {
		m, err := newDriverMap()
		if err != nil {
			return fmt.Errorf("driver counter map: %w", err)
		}
		s.driverMap = m
	}
	s.pinned = dir
	for name, m := range s.pinnedMaps() {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	_, err := s.PublishDriverCounters()
	return err
}

// pinnedMaps are the maps Pin pins: the BPF object's and the driver counters.
func (s *Server) pinnedMaps() map[string]*ebpf.Map {
	m := s.maps()
	if s.driverMap != nil {
		m[driverMapName] = s.driverMap
	}
	return m
}

func (s *Server) maps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"kv_stats": s.objs.KvStats, "kv_entries": s.objs.KvEntries,
		"pool_index": s.objs.PoolIndex, "pool_blocks": s.objs.PoolBlocks, "pool_stats": s.objs.PoolStats,
	}
}

// Close detaches everything and unpins.
func (s *Server) Close() error {
	errs := []error{s.detach()}
	if s.pinned != "" {
		for name := range s.pinnedMaps() {
			os.Remove(filepath.Join(s.pinned, name))
		}
		os.Remove(s.pinned)
		s.pinned = ""
	}
	if s.driverMap != nil {
		s.driverMap.Close()
		s.driverMap = nil
	}
	s.driver.close()
	s.driver = nil
	if s.policy != nil {
		s.policy.close()
		s.policy = nil
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
