package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cistern-ebpf/cistern/accum"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/internal/percpu"
)

// NaiveRecordSize is the fixed ring record of the naive channel
// (bpf/capture/naive.bpf.c): a 64-byte header and up to NaiveDataSize bytes.
const (
	NaiveRecordSize = 1024
	naiveHeader     = 64
	NaiveDataSize   = NaiveRecordSize - naiveHeader
)

var naiveStatNames = []string{"records", "ring_bytes", "payload_bytes", "lost_records", "lost_bytes"}

// NaiveStats are the naive channel's kernel counters, summed over the CPUs.
type NaiveStats struct {
	Records, RingBytes, PayloadBytes, LostRecords, LostBytes uint64
}

// NaiveRecord is one fragment as the naive channel carries it.
type NaiveRecord struct {
	TS   uint64 // bpf_ktime_get_ns at the fragment
	PID  uint32
	SSL  uint64 // the SSL* the fragment belongs to: its connection
	Dir  uint8  // 0 write, 1 read
	Len  uint32 // bytes the call moved
	Data []byte // the first min(Len, NaiveDataSize) of them
}

// PGParser parses naive fragments with the same PostgreSQL parser the
// accumulated capture uses, so both agents do the same work per query.
type PGParser struct {
	conns map[uint64]*pgConn
	out   []Query
}

// NewPGParser makes one.
func NewPGParser() *PGParser { return &PGParser{conns: map[uint64]*pgConn{}} }

// Feed parses one fragment and returns the queries it completed, in a slice
// the next call reuses.
func (p *PGParser) Feed(r NaiveRecord) []Query {
	c := p.conns[r.SSL]
	if c == nil {
		c = newPGConn(r.SSL)
		p.conns[r.SSL] = c
	}
	p.out = c.feed(p.out[:0], accum.Direction(r.Dir), r.Data, fragTimes{first: r.TS, last: r.TS, opens: true, closes: true}, r.PID)
	return p.out
}

// Naive is the benchmark's "before": one fixed 1 KiB record per SSL
// fragment, no batching, no reassembly. Only `cistern bench capture` uses it.
type Naive struct {
	objs   naiveObjects
	links  []link.Link
	reader *ringbuf.Reader
	raw    ringbuf.Record // reused, as accum.Reader does
}

// OpenNaive attaches the naive channel to pid's libssl with a ring of
// ringSize bytes (a power-of-two multiple of the page size).
func OpenNaive(pid int, ringSize uint32) (n *Naive, err error) {
	lib, err := FindLibSSL(pid)
	if err != nil {
		return nil, err
	}
	spec, err := loadNaive()
	if err != nil {
		return nil, err
	}
	spec.Maps["naive_ring"].MaxEntries = ringSize
	n = &Naive{}
	if err := spec.LoadAndAssign(&n.objs, nil); err != nil {
		return nil, fmt.Errorf("load naive capture: %w", err)
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return nil, err
	}
	uo := &link.UprobeOptions{PID: pid}
	o := &n.objs
	for _, a := range []struct {
		sym      string
		ret      bool
		optional bool
		prog     *ebpf.Program
	}{
		{"SSL_write", true, false, o.NaiveSslWriteRet},
		{"SSL_read", true, false, o.NaiveSslReadRet},
		{"SSL_write_ex", true, true, o.NaiveSslWriteRet},
		{"SSL_read_ex", true, true, o.NaiveSslReadRet},
		{"SSL_write", false, false, o.NaiveSslWrite},
		{"SSL_read", false, false, o.NaiveSslRead},
		{"SSL_write_ex", false, true, o.NaiveSslWriteEx},
		{"SSL_read_ex", false, true, o.NaiveSslReadEx},
	} {
		var l link.Link
		if a.ret {
			l, err = ex.Uretprobe(a.sym, a.prog, uo)
		} else {
			l, err = ex.Uprobe(a.sym, a.prog, uo)
		}
		if err != nil {
			if a.optional && errors.Is(err, link.ErrNoSymbol) {
				continue
			}
			return nil, fmt.Errorf("attach %s (%s): %w", a.sym, lib, err)
		}
		n.links = append(n.links, l)
	}
	if n.reader, err = ringbuf.NewReader(o.NaiveRing); err != nil {
		return nil, err
	}
	return n, nil
}

// Next waits up to timeout for one record (os.ErrDeadlineExceeded: none).
// Its Data aliases a buffer the next call overwrites.
func (n *Naive) Next(timeout time.Duration) (NaiveRecord, error) {
	n.reader.SetDeadline(time.Now().Add(timeout))
	if err := n.reader.ReadInto(&n.raw); err != nil {
		return NaiveRecord{}, err
	}
	b := n.raw.RawSample
	if len(b) < naiveHeader {
		return NaiveRecord{}, fmt.Errorf("naive record of %d bytes", len(b))
	}
	r := NaiveRecord{
		TS:  binary.LittleEndian.Uint64(b[0:]),
		PID: uint32(binary.LittleEndian.Uint64(b[8:]) >> 32),
		SSL: binary.LittleEndian.Uint64(b[24:]),
		Len: binary.LittleEndian.Uint32(b[32:]), Dir: uint8(binary.LittleEndian.Uint32(b[40:])),
	}
	caplen := int(binary.LittleEndian.Uint32(b[36:]))
	if caplen > len(b)-naiveHeader {
		caplen = len(b) - naiveHeader
	}
	r.Data = b[naiveHeader : naiveHeader+caplen]
	return r, nil
}

// Stats reads the kernel counters.
func (n *Naive) Stats() (NaiveStats, error) {
	v, err := percpu.Sum(n.objs.NaiveStats, naiveStatNames)
	if err != nil {
		return NaiveStats{}, fmt.Errorf("naive stats: %w", err)
	}
	return NaiveStats{Records: v["records"], RingBytes: v["ring_bytes"], PayloadBytes: v["payload_bytes"],
		LostRecords: v["lost_records"], LostBytes: v["lost_bytes"]}, nil
}

// Close detaches and unloads everything.
func (n *Naive) Close() error {
	for _, l := range n.links {
		l.Close()
	}
	n.links = nil
	if n.reader != nil {
		n.reader.Close()
		n.reader = nil
	}
	return n.objs.Close()
}
