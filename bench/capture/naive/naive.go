// Package naive is the "before" of `cistern bench capture`: the same
// uprobes/uretprobes on libssl as capture's TLS channel, but every
// SSL_read/SSL_write fragment becomes one fixed 1 KiB ring record
// (bpf/capturebench/naive.bpf.c), with no batching and no reassembly.
// Only the capture bench uses it; it sits beside its bench, as
// bench/queryref sits beside the query bench.
package naive

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../../bpf/include" -target bpfel naive ../../../bpf/capturebench/naive.bpf.c

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/percpu"
)

// RecordSize is the fixed ring record of the naive channel
// (bpf/capturebench/naive.bpf.c): a 64-byte header and up to DataSize bytes.
const (
	RecordSize  = 1024
	naiveHeader = 64
	DataSize    = RecordSize - naiveHeader
)

var naiveStatNames = []string{"records", "ring_bytes", "payload_bytes", "lost_records", "lost_bytes"}

// Stats are the naive channel's kernel counters, summed over the CPUs.
type Stats struct {
	Records, RingBytes, PayloadBytes, LostRecords, LostBytes uint64
}

// Record is one fragment as the naive channel carries it.
type Record struct {
	TS   uint64 // bpf_ktime_get_ns at the fragment
	PID  uint32
	SSL  uint64 // the SSL* the fragment belongs to: its connection
	Dir  uint8  // 0 write, 1 read
	Len  uint32 // bytes the call moved
	Data []byte // the first min(Len, DataSize) of them
}

// Channel is the naive channel: one fixed 1 KiB record per SSL
// fragment, no batching, no reassembly. Only `cistern bench capture` uses it.
type Channel struct {
	objs   naiveObjects
	links  []link.Link
	reader *ringbuf.Reader
	raw    ringbuf.Record // reused, as accum.Reader does
}

// Open attaches the naive channel to pid's libssl (or, if it maps none, its
// executable: Node.js carries OpenSSL inside) with a ring of ringSize bytes
// (a power-of-two multiple of the page size).
func Open(pid int, ringSize uint32) (n *Channel, err error) {
	lib, err := capture.FindLibSSL(pid)
	if err != nil {
		lib = fmt.Sprintf("/proc/%d/exe", pid)
	}
	spec, err := loadNaive()
	if err != nil {
		return nil, err
	}
	spec.Maps["naive_ring"].MaxEntries = ringSize
	n = &Channel{}
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
func (n *Channel) Next(timeout time.Duration) (Record, error) {
	n.reader.SetDeadline(time.Now().Add(timeout))
	if err := n.reader.ReadInto(&n.raw); err != nil {
		return Record{}, err
	}
	b := n.raw.RawSample
	if len(b) < naiveHeader {
		return Record{}, fmt.Errorf("naive record of %d bytes", len(b))
	}
	r := Record{
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
func (n *Channel) Stats() (Stats, error) {
	v, err := percpu.Sum(n.objs.NaiveStats, naiveStatNames)
	if err != nil {
		return Stats{}, fmt.Errorf("naive stats: %w", err)
	}
	return Stats{Records: v["records"], RingBytes: v["ring_bytes"], PayloadBytes: v["payload_bytes"],
		LostRecords: v["lost_records"], LostBytes: v["lost_bytes"]}, nil
}

// Close detaches and unloads everything.
func (n *Channel) Close() error {
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
