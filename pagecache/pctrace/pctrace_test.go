package pctrace

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTripAndAccesses(t *testing.T) {
	evs := []Event{
		{Op: OpAdd, Order: 2, File: 1, Index: 0, TID: 7},
		{Op: OpRead, File: 1, Index: 0, Nr: 4, TID: 7, Read: 5},
		{Op: OpRead, File: 2, Index: 9, Nr: 1, TID: 8, Read: 1}, // another thread between batches
		{Op: OpRead, File: 1, Index: 3, Nr: 2, TID: 7, Read: 5}, // page 3 again, page 4 new
		{Op: OpRead, File: 1, Index: 0, Nr: 1, TID: 7, Read: 6}, // a new read: page 0 again counts
		{Op: OpDel, Order: 0, File: 1, Index: 1},
		{Op: OpRead, File: 1, Index: 2, Nr: 1}, // read 0: its own read
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []Event
	if err := Read(bytes.NewReader(buf.Bytes()), func(e Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("%d records read back, want %d", len(got), len(evs))
	}
	for i := range evs {
		if got[i] != evs[i] {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], evs[i])
		}
	}
	keys, from, s := Accesses(got, 0)
	want := []uint64{Key(1, 0), Key(1, 1), Key(1, 2), Key(1, 3), Key(2, 9), Key(1, 4), Key(1, 0), Key(1, 2)}
	if len(keys) != len(want) {
		t.Fatalf("accesses %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("accesses %v, want %v", keys, want)
		}
	}
	if from != 0 {
		t.Fatalf("no warm-up, measured from access %d", from)
	}
	if _, from, s := Accesses(got, 0.5); from != 6 || s.Reads != 2 || s.WarmupReads != 2 || s.PagesLoaded != 0 || s.PagesGone != 1 {
		t.Fatalf("half warm-up: measured from access %d, summary %+v", from, s)
	}
	if s.Reads != 4 || s.PagesLoaded != 4 || s.PagesGone != 1 || s.MaxResident != 4 || s.Files != 2 {
		t.Fatalf("summary %+v", s)
	}
}

// TestAccessesAtPutsInAddsOutsideReads: an add its thread's next read
// holds is that read's; a write's add (another file next, or no read
// after) and readahead past the read's range go into the sequence where
// they were added; the measured part starts at the event given.
func TestAccessesAtPutsInAddsOutsideReads(t *testing.T) {
	evs := []Event{
		{Op: OpAdd, File: 1, Index: 0, TID: 7},                  // 0: read 1's miss (warm-up)
		{Op: OpRead, File: 1, Index: 0, Nr: 1, TID: 7, Read: 1}, // 1
		{Op: OpAdd, Order: 1, File: 2, Index: 4, TID: 7},        // 2: a write of file 2 (next read is of file 1)
		{Op: OpAdd, File: 1, Index: 5, TID: 7},                  // 3: read 2's miss
		{Op: OpAdd, File: 1, Index: 9, TID: 7},                  // 4: readahead past read 2's range
		{Op: OpDel, File: 1, Index: 0, TID: 8},                  // 5: another thread between
		{Op: OpRead, File: 1, Index: 5, Nr: 2, TID: 7, Read: 2}, // 6: pages 5, 6
		{Op: OpAdd, File: 3, Index: 0, TID: 9},                  // 7: a thread that never reads (a flush)
	}
	keys, from, s := AccessesAt(evs, 2, true)
	want := []uint64{Key(1, 0), Key(2, 4), Key(2, 5), Key(1, 9), Key(1, 5), Key(1, 6), Key(3, 0)}
	if len(keys) != len(want) {
		t.Fatalf("accesses %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("accesses %v, want %v", keys, want)
		}
	}
	if from != 1 || s.WarmupReads != 1 || s.Reads != 1 || s.PagesLoaded != 5 || s.PagesAddedOutsideReads != 4 || s.PagesGone != 1 {
		t.Fatalf("from %d, summary %+v", from, s)
	}
	// Without adds: the reads alone, measured from the same event.
	keys, from, s = AccessesAt(evs, 2, false)
	if len(keys) != 3 || from != 1 || s.PagesAddedOutsideReads != 0 || s.PagesLoaded != 5 {
		t.Fatalf("reads only: %v from %d, %+v", keys, from, s)
	}
}

// TestAccessesAtTakesWrites: with adds, a write record is an access of
// its pages, but not the write's own add's (its first access, as the
// agent's frequency policies skip a folio's first access after its add),
// and the first read of a page readahead added is not one either; a
// write to a cached page is. Without adds, and in the read calls, writes
// are nothing. Flags survive the record's round trip.
func TestAccessesAtTakesWrites(t *testing.T) {
	evs := []Event{
		{Op: OpAdd, File: 1, Index: 0, TID: 7},                           // 0: a write adds page 0
		{Op: OpRead, Flags: FlagWrite, File: 1, Index: 0, Nr: 1, TID: 7}, // 1: and dirties it: its own add's
		{Op: OpRead, File: 1, Index: 0, Nr: 1, TID: 8, Read: 1},          // 2: a read of it: an access
		{Op: OpRead, Flags: FlagWrite, File: 1, Index: 0, Nr: 1, TID: 7}, // 3: written again, cached: an access
		{Op: OpAdd, File: 2, Index: 3, TID: 8},                           // 4: readahead (no read holds it)
		{Op: OpRead, File: 2, Index: 3, Nr: 1, TID: 9, Read: 1},          // 5: its first read: not an access
		{Op: OpRead, File: 2, Index: 3, Nr: 1, TID: 9, Read: 2},          // 6: the next is
		{Op: OpDel, File: 1, Index: 0, TID: 5},                           // 7: page 0 goes
		{Op: OpRead, Flags: FlagWrite, File: 1, Index: 0, Nr: 1, TID: 7}, // 8: a write to it: an access (a miss)
	}
	keys, _, s := AccessesAt(evs, 0, true)
	want := []uint64{Key(1, 0), Key(1, 0), Key(1, 0), Key(2, 3), Key(2, 3), Key(1, 0)}
	if len(keys) != len(want) {
		t.Fatalf("accesses %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("accesses %v, want %v", keys, want)
		}
	}
	if s.Reads != 3 || s.PageReads != 3 || s.PagesWritten != 2 || s.PagesAddedOutsideReads != 2 {
		t.Fatalf("summary %+v", s)
	}
	keys, _, s = Accesses(evs, 0)
	if len(keys) != 3 || s.Reads != 3 || s.PagesWritten != 0 {
		t.Fatalf("reads only: %v, %+v", keys, s)
	}
	var b [RecordSize]byte
	evs[1].Encode(b[:])
	if got := Decode(b[:]); got != evs[1] {
		t.Fatalf("round trip %+v, want %+v", got, evs[1])
	}
}

func TestBadInput(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	w.Write(Event{Op: OpRead, File: 1, Nr: 1})
	w.Flush()
	full := buf.Bytes()
	noop := func(Event) error { return nil }
	if err := Read(bytes.NewReader(full[:len(full)-5]), noop); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated trace: %v, want ErrTruncated", err)
	}
	if err := Read(bytes.NewReader([]byte("time,object,size\n1,2,3\n")), noop); !errors.Is(err, ErrFormat) {
		t.Fatalf("a CSV trace: %v, want ErrFormat", err)
	}
	if err := Read(bytes.NewReader(nil), noop); !errors.Is(err, ErrFormat) {
		t.Fatalf("an empty file: %v, want ErrFormat", err)
	}
	bad := append([]byte{}, full...)
	bad[len(Magic)] = 9 // op 9
	if err := Read(bytes.NewReader(bad), noop); !errors.Is(err, ErrFormat) {
		t.Fatalf("op 9: %v, want ErrFormat", err)
	}
}
