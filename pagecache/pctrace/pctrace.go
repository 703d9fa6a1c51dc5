// Package pctrace is the page-cache access trace: the folios of a cgroup's
// watched files as the kernel added and deleted them, and the pages every
// buffered read was served from, in order (`cistern cache trace` writes
// it; `cistern cache replay --format pagecache` and the page-cache bench
// read it).
//
// File layout (little-endian): the 8-byte magic "CSTPCT01", then records
// of 32 bytes, each a struct pc_event of cistern/pagecache.h:
//
//	op u8 (1 add, 2 delete, 3 read), order u8, flags u16, file u32,
//	index u64 (first page), tid u32, tgid u32,
//	nr u32 (read: pages), read u32 (read: its number in its thread)
//
// File ids are the tracker's (1 and up, in the order files were watched);
// the key of a page is file << 32 | index.
package pctrace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Magic starts every trace file.
const Magic = "CSTPCT01"

// RecordSize is the size of one record (sizeof(struct pc_event)).
const RecordSize = 32

// Ops of a record.
const (
	OpAdd  = 1
	OpDel  = 2
	OpRead = 3
)

// Flags of a record (pc_event.flags, PC_EV_* in cistern/pagecache.h).
const (
	FlagScan  = 1 // added or read by a thread detected as a scanner
	FlagWrite = 2 // read record: a write made the folio dirty (Nr: its pages), not a read
)

// Event is one record: a struct pc_event.
type Event struct {
	Op    uint8
	Order uint8 // add, delete: the folio's order (1 << Order pages)
	Flags uint16
	File  uint32 // the tracker's file id
	Index uint64 // first page
	TID   uint32
	TGID  uint32
	Nr    uint32 // read: pages
	Read  uint32 // read: the read's number in thread TID (0: none); batches of one read(2) share it
}

// ErrFormat is returned for a file that is not a page-cache trace.
var ErrFormat = errors.New("not a page-cache trace (want a file written by `cistern cache trace`)")

// ErrTruncated is returned for a trace that ends inside a record.
var ErrTruncated = errors.New("page-cache trace truncated inside a record")

// Decode reads one record from b (len(b) >= RecordSize).
func Decode(b []byte) Event {
	le := binary.LittleEndian
	return Event{Op: b[0], Order: b[1], Flags: le.Uint16(b[2:]), File: le.Uint32(b[4:]), Index: le.Uint64(b[8:]),
		TID: le.Uint32(b[16:]), TGID: le.Uint32(b[20:]), Nr: le.Uint32(b[24:]), Read: le.Uint32(b[28:])}
}

// Encode writes e into b (len(b) >= RecordSize).
func (e Event) Encode(b []byte) {
	le := binary.LittleEndian
	b[0], b[1] = e.Op, e.Order
	le.PutUint16(b[2:], e.Flags)
	le.PutUint32(b[4:], e.File)
	le.PutUint64(b[8:], e.Index)
	le.PutUint32(b[16:], e.TID)
	le.PutUint32(b[20:], e.TGID)
	le.PutUint32(b[24:], e.Nr)
	le.PutUint32(b[28:], e.Read)
}

// Writer writes a trace.
type Writer struct {
	w   *bufio.Writer
	buf [RecordSize]byte
	N   uint64 // records written
}

// NewWriter writes the magic and returns a writer of records.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.WriteString(Magic); err != nil {
		return nil, err
	}
	return &Writer{w: bw}, nil
}

// Write appends one record.
func (w *Writer) Write(e Event) error {
	e.Encode(w.buf[:])
	w.N++
	_, err := w.w.Write(w.buf[:])
	return err
}

// WriteRaw appends a record already in pc_event layout.
func (w *Writer) WriteRaw(b []byte) error {
	if len(b) < RecordSize {
		return fmt.Errorf("record of %d bytes, want %d", len(b), RecordSize)
	}
	w.N++
	_, err := w.w.Write(b[:RecordSize])
	return err
}

// Flush writes what is buffered.
func (w *Writer) Flush() error { return w.w.Flush() }

// Read calls emit for each record of the trace in r.
func Read(r io.Reader, emit func(Event) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var head [len(Magic)]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || string(head[:]) != Magic {
		return ErrFormat
	}
	var b [RecordSize]byte
	for n := uint64(0); ; n++ {
		k, err := io.ReadFull(br, b[:])
		if err == io.EOF {
			return nil
		}
		if err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: record %d has %d of %d bytes", ErrTruncated, n, k, RecordSize)
		}
		if err != nil {
			return err
		}
		e := Decode(b[:])
		if e.Op < OpAdd || e.Op > OpRead {
			return fmt.Errorf("%w: record %d has op %d", ErrFormat, n, e.Op)
		}
		if err := emit(e); err != nil {
			return err
		}
	}
}

// ReadFile reads every record of the trace in path.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []Event
	if err := Read(f, func(e Event) error { evs = append(evs, e); return nil }); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return evs, nil
}
