package accum

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Gap is a run of records of one connection that never arrived: the kernel
// counted them (Stats.LostRecords, BusyDrops, Faults), and here is where.
type Gap struct {
	ConnID  uint64
	FromSeq uint64 // first missing sequence number
	Missing uint64 // how many
}

func (g Gap) String() string {
	return fmt.Sprintf("connection %d: records %d..%d lost", g.ConnID, g.FromSeq, g.FromSeq+g.Missing-1)
}

// Stream is what arrived of one connection, in order, per direction.
type Stream struct {
	ConnID  uint64
	Data    [2][]byte // by Direction
	NextSeq uint64    // sequence number expected next
	Records uint64
	Gaps    []Gap
	Closed  bool // the ACCUM_F_CLOSE record arrived
}

// Reassembler puts records back into per-connection, per-direction byte
// streams and detects every gap in their sequence numbers.
type Reassembler struct {
	Streams map[uint64]*Stream
	Gaps    []Gap // every gap seen, in order
	// SeqOnly: track sequence numbers and gaps but keep no bytes (Stream.Data
	// stays empty), for a consumer that parses each record's segments itself.
	SeqOnly bool
}

// NewReassembler returns an empty Reassembler.
func NewReassembler() *Reassembler {
	return &Reassembler{Streams: map[uint64]*Stream{}}
}

// Add appends r's bytes to its connection's stream and returns the gap
// before r, if any. After a close record the connection's next record
// starts a new stream (the kernel restarts its sequence at 1): take the old
// one with Take first if you need it.
func (a *Reassembler) Add(r Record) *Gap {
	s := a.Streams[r.ConnID]
	if s == nil || (s.Closed && r.Seq == 1) {
		s = &Stream{ConnID: r.ConnID, NextSeq: 1}
		a.Streams[r.ConnID] = s
	}
	var gap *Gap
	if r.Seq != s.NextSeq {
		g := Gap{ConnID: r.ConnID, FromSeq: s.NextSeq}
		if r.Seq > s.NextSeq {
			g.Missing = r.Seq - s.NextSeq
		}
		s.Gaps = append(s.Gaps, g)
		a.Gaps = append(a.Gaps, g)
		gap = &g
	}
	s.NextSeq = r.Seq + 1
	s.Records++
	if !a.SeqOnly {
		for _, seg := range r.Segments {
			s.Data[seg.Dir&1] = append(s.Data[seg.Dir&1], seg.Data...)
		}
	}
	if r.Flags&FlagClose != 0 {
		s.Closed = true
	}
	return gap
}

// Take removes and returns connection id's stream (nil if none).
func (a *Reassembler) Take(id uint64) *Stream {
	s := a.Streams[id]
	delete(a.Streams, id)
	return s
}

// Reader drains the channel's ring buffer into a Reassembler.
type Reader struct {
	rb      *ringbuf.Reader
	raw     ringbuf.Record // reused: reading allocates nothing per record
	rec     Record
	Streams *Reassembler
	Bytes   uint64 // ring record bytes read (record headers included)
	pump    *pump  // see Pump
	ring    *ebpf.Map
}

// NewReader reads the ring buffer map accum_ring.
func NewReader(ring *ebpf.Map) (*Reader, error) {
	rb, err := ringbuf.NewReader(ring)
	if err != nil {
		return nil, fmt.Errorf("accum ring reader: %w", err)
	}
	return &Reader{rb: rb, Streams: NewReassembler(), ring: ring}, nil
}

// Read waits up to timeout for the next record, adds it to r.Streams and
// returns it. os.ErrDeadlineExceeded: nothing arrived. Records written
// without a wakeup are found too, when the deadline passes. The record's
// segments alias a buffer the next Read overwrites: copy what you keep.
func (r *Reader) Read(timeout time.Duration) (Record, error) {
	var b []byte
	if r.pump != nil {
		var err error
		if b, err = r.pump.next(timeout); err != nil {
			return Record{}, err
		}
	} else {
		r.rb.SetDeadline(time.Now().Add(timeout))
		if err := r.rb.ReadInto(&r.raw); err != nil {
			return Record{}, err
		}
		b = r.raw.RawSample
	}
	if err := ParseRecordInto(b, &r.rec); err != nil {
		return Record{}, err
	}
	r.Bytes += uint64(len(b))
	r.Streams.Add(r.rec)
	return r.rec, nil
}

// Drain reads records until none arrives for idle, and returns how many.
func (r *Reader) Drain(idle time.Duration) (int, error) {
	n := 0
	for {
		_, err := r.Read(idle)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// Close stops the reader (and its pump).
func (r *Reader) Close() error {
	if r.pump == nil {
		return r.rb.Close()
	}
	close(r.pump.stop)
	if r.pump.ringFile != nil {
		r.pump.ringFile.Close() // interrupts the pump's wait
	}
	err := r.rb.Close()
	<-r.pump.done
	return err
}
