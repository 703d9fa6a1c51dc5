package accum

import (
	"encoding/binary"
	"fmt"
)

// Direction of a segment.
type Direction uint8

const (
	Write Direction = 0 // egress: the process sent the bytes
	Read  Direction = 1 // ingress: the process received them
)

func (d Direction) String() string {
	if d == Read {
		return "read"
	}
	return "write"
}

// Record flags (ACCUM_F_*).
const (
	FlagClose = 0x1 // last record of the connection
	FlagTimer = 0x2 // flushed by the latency bound
	FlagChunk = 0x4 // part of a fragment larger than the flush size
)

// RecordHeader is sizeof(struct accum_rec).
const RecordHeader = 48

// SegmentHeader is ACCUM_SEG_HDR: length and direction, then the time of
// the segment's last fragment (and whether it had several).
const SegmentHeader = 4

const (
	segMulti   = 0x8000 // ACCUM_SEG_MULTI
	segTimeSat = 0x7fff // ACCUM_SEG_TSAT: "at least this late"
)

// Segment is a run of bytes in one direction. LastNS is the monotonic time
// of its last fragment, to the microsecond; FirstNS that of its first when
// the segment is one fragment, else the time of the segment before it in
// the record (or the record's FirstNS): a bound, and FirstExact is false.
// A segment more than 32 ms into its batch has LastNS = the record's
// LastNS, and LastExact false.
type Segment struct {
	Dir                   Direction
	Data                  []byte
	FirstNS, LastNS       uint64
	FirstExact, LastExact bool
}

// Record is one batch (struct accum_rec and its segments).
type Record struct {
	ConnID          uint64
	Seq             uint64
	FirstNS, LastNS uint64
	PID, TID        uint32
	Proto           uint8
	Flags           uint8
	Dir             Direction // of the first segment
	Segments        []Segment // Data aliases the buffer given to ParseRecord
}

// ParseRecord decodes a ring record.
func ParseRecord(b []byte) (Record, error) {
	var r Record
	err := ParseRecordInto(b, &r)
	return r, err
}

// ParseRecordInto decodes a ring record into r, reusing r.Segments' array:
// a reader that handles one record at a time allocates nothing per record.
func ParseRecordInto(b []byte, r *Record) error {
	if len(b) < RecordHeader {
		return fmt.Errorf("accum record of %d bytes: shorter than its %d-byte header", len(b), RecordHeader)
	}
	le := binary.LittleEndian
	*r = Record{
		ConnID: le.Uint64(b[0:]), Seq: le.Uint64(b[8:]), FirstNS: le.Uint64(b[16:]), LastNS: le.Uint64(b[24:]),
		PID: le.Uint32(b[32:]), TID: le.Uint32(b[36:]),
		Proto: b[44], Flags: b[45], Dir: Direction(b[46] & 1),
		Segments: r.Segments[:0],
	}
	n := le.Uint32(b[40:])
	if int(n) > len(b)-RecordHeader {
		return fmt.Errorf("accum record says %d bytes of segments, has %d", n, len(b)-RecordHeader)
	}
	p := b[RecordHeader : RecordHeader+int(n)]
	prev := r.FirstNS
	for len(p) > 0 {
		if len(p) < SegmentHeader {
			return fmt.Errorf("accum record %d of connection %d: truncated segment header", r.Seq, r.ConnID)
		}
		h, tm := le.Uint16(p), le.Uint16(p[2:])
		l := int(h & 0x7fff)
		if l > len(p)-SegmentHeader {
			return fmt.Errorf("accum record %d of connection %d: segment of %d bytes, %d left", r.Seq, r.ConnID, l, len(p)-SegmentHeader)
		}
		s := Segment{Dir: Direction(h >> 15), Data: p[SegmentHeader : SegmentHeader+l],
			FirstNS: prev, LastNS: r.FirstNS + uint64(tm&segTimeSat)*1000, LastExact: tm&segTimeSat != segTimeSat}
		if !s.LastExact {
			s.LastNS = r.LastNS
		}
		if tm&segMulti == 0 {
			s.FirstNS, s.FirstExact = s.LastNS, s.LastExact
		}
		prev = s.LastNS
		r.Segments = append(r.Segments, s)
		p = p[SegmentHeader+l:]
	}
	return nil
}

// PayloadLen is the number of fragment bytes in r.
func (r Record) PayloadLen() int {
	n := 0
	for _, s := range r.Segments {
		n += len(s.Data)
	}
	return n
}
