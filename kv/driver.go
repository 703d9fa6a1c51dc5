package kv

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
)

// DriverStatNames are the interface's own counters of packets it dropped on
// the way out, reported beside the BPF counters (Stats, `kv stats`,
// Prometheus cistern_kv_driver_*):
//
//   - driver_xdp_tx_errors: XDP_TX frames the driver could not send, the sum
//     of its ethtool statistics named *xdp_tx_err* (veth:
//     rx_queue_N_xdp_tx_errors; per-queue entries are skipped when the driver
//     also gives a total). On a veth in native mode, every reply to a peer
//     without an XDP program lands here.
//   - driver_tx_dropped: the interface's tx_dropped (rtnetlink stats64),
//     which also counts skbs the veth could not pass to its peer: generic
//     XDP_TX and the TC path's redirected replies, and (on veth) the native
//     XDP_TX errors again. It counts memcached's own dropped replies too.
//
// A driver that has no such statistic leaves its name out.
var DriverStatNames = []string{"driver_xdp_tx_errors", "driver_tx_dropped"}

// driverStats reads the interface's counters through sockets opened in its
// network namespace, so any goroutine can read them.
type driverStats struct {
	mu      sync.Mutex
	ifindex int
	et      *ethtool.Ethtool
	nl      *netlink.Handle
	base    map[string]uint64 // the values at Attach: counters count from there
}

// openDriverStats must run in the interface's network namespace.
func openDriverStats(ifindex int) (*driverStats, error) {
	et, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("ethtool socket: %w", err)
	}
	h, err := netlink.NewHandle(0) // NETLINK_ROUTE
	if err != nil {
		et.Close()
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	d := &driverStats{ifindex: ifindex, et: et, nl: h}
	if d.base, err = d.readRaw(); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// read returns the counters since openDriverStats, like the BPF counters
// since Load (a counter that went backwards restarts from zero).
func (d *driverStats) read() (map[string]uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.readRaw()
	if err != nil {
		return nil, err
	}
	for n, v := range c {
		if b := d.base[n]; v >= b {
			c[n] = v - b
		} else {
			d.base[n] = 0
		}
	}
	return c, nil
}

func (d *driverStats) readRaw() (map[string]uint64, error) {
	l, err := d.nl.LinkByIndex(d.ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", d.ifindex, err)
	}
	out := map[string]uint64{}
	if st := l.Attrs().Statistics; st != nil {
		out["driver_tx_dropped"] = st.TxDropped
	}
	es, err := d.et.Stats(l.Attrs().Name)
	if err != nil {
		// A driver without ethtool statistics (EOPNOTSUPP) simply has none.
		return out, nil
	}
	if v, ok := sumXDPTxErrors(es); ok {
		out["driver_xdp_tx_errors"] = v
	}
	return out, nil
}

// sumXDPTxErrors adds the statistics named *xdp_tx_err*. When some of them
// carry no digit (a driver's total, as mlx5's rx_xdp_tx_err beside its
// per-channel ones), only those are added.
func sumXDPTxErrors(es map[string]uint64) (uint64, bool) {
	var all, totals uint64
	found, hasTotal := false, false
	for name, v := range es {
		if !strings.Contains(name, "xdp_tx_err") {
			continue
		}
		found = true
		all += v
		if !strings.ContainsAny(name, "0123456789") {
			hasTotal = true
			totals += v
		}
	}
	if hasTotal {
		return totals, true
	}
	return all, found
}

func (d *driverStats) close() {
	if d == nil {
		return
	}
	d.et.Close()
	d.nl.Close()
}

// DriverCounters reads the interface's drop counters (DriverStatNames)
// since Attach; it is empty before.
func (s *Server) DriverCounters() (map[string]uint64, error) {
	if s.driver == nil {
		return map[string]uint64{}, nil
	}
	return s.driver.read()
}

// driverMapName is the pinned map through which `cistern kv serve` hands
// the driver counters to `cistern kv stats` (another process, maybe in
// another network namespace): a hash from the index in DriverStatNames to
// the value, written by PublishDriverCounters.
const driverMapName = "kv_driver"

func newDriverMap() (*ebpf.Map, error) {
	return ebpf.NewMap(&ebpf.MapSpec{
		Name: driverMapName, Type: ebpf.Hash, KeySize: 4, ValueSize: 8,
		MaxEntries: uint32(len(DriverStatNames)),
	})
}

// PublishDriverCounters reads the driver counters and writes them where
// PinnedStats finds them; it returns what it read. `cistern kv serve` calls
// it every second.
func (s *Server) PublishDriverCounters() (map[string]uint64, error) {
	c, err := s.DriverCounters()
	if err != nil {
		return nil, err
	}
	if s.driverMap != nil {
		for i, n := range DriverStatNames {
			if v, ok := c[n]; ok {
				if err := s.driverMap.Put(uint32(i), v); err != nil {
					return c, err
				}
			}
		}
	}
	return c, nil
}

// pinnedDriverCounters reads what PublishDriverCounters wrote (none when
// the map is missing: a server of an older build).
func pinnedDriverCounters(dir string) map[string]uint64 {
	out := map[string]uint64{}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, driverMapName), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return out
	}
	defer m.Close()
	for i, n := range DriverStatNames {
		var v uint64
		if m.Lookup(uint32(i), &v) == nil {
			out[n] = v
		}
	}
	return out
}
