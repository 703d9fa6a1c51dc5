package evict

import (
	"strings"
	"testing"
)

// TestGetScanByHand replays through GET-SCAN with 4 objects, switching the
// inserting actor between a get thread (pid 1) and a registered scan
// thread (tid 7). Lists are head (newest) first, hit counts in brackets.
func TestGetScanByHand(t *testing.T) {
	c := open(t, "get-scan", 4)
	coll := c.Collection()
	if err := coll.Maps["getscan_scan_ids"].Put(uint32(7), uint8(1)); err != nil {
		t.Fatal(err)
	}
	actor := coll.Variables["getscan_actor"]
	steps := []struct {
		actor uint64
		trace string
		want  string
	}{
		// get [B1 A2]
		{1<<32 | 1, "ABAAB", "M M H H H"},
		// S, T fill the cache: scan [T S]. U: the scan list goes first,
		// sample S0 T0 from the tail: S; scan [U T], hand on T.
		{7<<32 | 7, "STU", "M M MS"},
		// T hit by a get thread: a get entry now, get [T1 B1 A2], scan
		// [U]. C: U, the last scan entry. D: scan empty, get [C0 T1 B1
		// A2] sampled from the tail: C. E: D likewise.
		{1<<32 | 1, "TCDE", "H MU MC MD"},
		// V by the scanner: scan empty, get [E0 T1 B1 A2]: E; scan [V].
		{7<<32 | 7, "V", "ME"},
		// F by a get thread still evicts the scan entry V first.
		{1<<32 | 1, "F", "MV"},
	}
	for _, s := range steps {
		if err := actor.Set(s.actor); err != nil {
			t.Fatal(err)
		}
		reqs := trace(s.trace)
		out := make([]Outcome, len(reqs))
		if _, err := c.Replay(reqs, out); err != nil {
			t.Fatal(err)
		}
		if got := outcomes(out); got != s.want {
			t.Errorf("get-scan on %s (actor %#x):\n got %s\nwant %s", s.trace, s.actor, got, s.want)
		}
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["fallbacks"] != 0 || st["invalid"] != 0 || st["short"] != 0 {
		t.Errorf("get-scan needed help: %v", st)
	}
}

// TestGetScanManyCandidates asks for more victims than one sample holds
// from a mixed cache through a scanner flood: every scan entry goes before
// any get entry, and nothing is proposed twice.
func TestGetScanManyCandidates(t *testing.T) {
	c := open(t, "get-scan", 40)
	coll := c.Collection()
	if err := coll.Maps["getscan_scan_ids"].Put(uint32(9), uint8(1)); err != nil {
		t.Fatal(err)
	}
	actor := coll.Variables["getscan_actor"]
	var gets, scans []Request
	for i := range 20 {
		gets = append(gets, Request{Key: uint64(1000 + i), Size: 1})
		scans = append(scans, Request{Key: uint64(2000 + i), Size: 1})
	}
	if err := actor.Set(uint64(5<<32 | 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replay(gets, nil); err != nil {
		t.Fatal(err)
	}
	if err := actor.Set(uint64(9<<32 | 10)); err != nil { // registered by tgid
		t.Fatal(err)
	}
	if _, err := c.Replay(scans, nil); err != nil {
		t.Fatal(err)
	}
	// 20 new get keys: each evicts one scan entry.
	if err := actor.Set(uint64(5<<32 | 5)); err != nil {
		t.Fatal(err)
	}
	var more []Request
	for i := range 20 {
		more = append(more, Request{Key: uint64(3000 + i), Size: 1})
	}
	out := make([]Outcome, len(more))
	if _, err := c.Replay(more, out); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for i, o := range out {
		if o.Evicted != 1 || o.Victim < 2000 || o.Victim >= 2020 || seen[o.Victim] {
			t.Fatalf("request %d: evicted %d, victim %d: want a new scan key", i, o.Evicted, o.Victim)
		}
		seen[o.Victim] = true
	}
	hits, err := c.Replay(gets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if hits != 20 {
		t.Errorf("%d of 20 get keys still resident", hits)
	}
	st, _ := c.Stats()
	if st["fallbacks"] != 0 || st["invalid"] != 0 {
		t.Errorf("get-scan needed help: %v", st)
	}
}

// TestGetScanScanFlag: with no scanner registered, requests flagged Scan
// (EVICT_REQ_SCAN: the page-cache agent's scan detection) are scan
// entries: victims before any get entry, read again by a scan or not.
// A scan entry a point read (no flag) reads again is a get entry.
func TestGetScanScanFlag(t *testing.T) {
	req := func(k uint64, scan bool) Request { return Request{Key: k, Size: 1, Scan: scan} }
	for _, tc := range []struct {
		name string
		reqs []Request
		// victims: the first ones exactly, then one of last.
		first, last string
	}{
		// gets A B, scans S T (cache full); T read by its scan again;
		// C and D (gets) evict S, T; E one of A B (hit counts 0, the
		// sample's first: the scan list is empty).
		{"scan hit", []Request{req('A', false), req('B', false), req('S', true), req('T', true), req('T', true), req('C', false), req('D', false), req('E', false)}, "ST", "AB"},
		// the same, T read by a point read: a get entry now (hit count
		// 1), so C evicts S, and D and E take get entries of count 0;
		// T stays.
		{"point read hit", []Request{req('A', false), req('B', false), req('S', true), req('T', true), req('T', false), req('C', false), req('D', false), req('E', false)}, "S", "ABCD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, "get-scan", 4)
			out := make([]Outcome, len(tc.reqs))
			if _, err := c.Replay(tc.reqs, out); err != nil {
				t.Fatal(err)
			}
			var victims []byte
			for _, o := range out {
				if o.Evicted > 0 {
					victims = append(victims, byte(o.Victim))
				}
			}
			n := len(tc.first)
			if len(victims) != 3 || string(victims[:n]) != tc.first {
				t.Fatalf("victims %q: want %s first, then of %s", victims, tc.first, tc.last)
			}
			for _, v := range victims[n:] {
				if !strings.ContainsRune(tc.last, rune(v)) {
					t.Errorf("victims %q: want %s first, then of %s", victims, tc.first, tc.last)
				}
			}
			if tc.name == "point read hit" && strings.ContainsRune(string(victims), 'T') {
				t.Errorf("victims %q: T, read by a point read, was evicted", victims)
			}
		})
	}
}
