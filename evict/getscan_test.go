package evict

import (
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
		// T hit (T1). C: sample T1 U0: U. D: T, the last scan entry.
		// E: scan empty, get [D C B1 A2] sampled from the tail: C.
		{1<<32 | 1, "TCDE", "H MU MT MC"},
		// V by the scanner: scan empty, get [E D B1 A2] from the hand (A):
		// D; scan [V].
		{7<<32 | 7, "V", "MD"},
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
// entries: victims before any get entry, hit or not.
func TestGetScanScanFlag(t *testing.T) {
	c := open(t, "get-scan", 4)
	req := func(k uint64, scan bool) Request { return Request{Key: k, Size: 1, Scan: scan} }
	// gets A B, scans S T (cache full); T hit; C and D (gets) evict S, T.
	reqs := []Request{req('A', false), req('B', false), req('S', true), req('T', true), req('T', false), req('C', false), req('D', false), req('E', false)}
	out := make([]Outcome, len(reqs))
	if _, err := c.Replay(reqs, out); err != nil {
		t.Fatal(err)
	}
	var victims []byte
	for _, o := range out {
		if o.Evicted > 0 {
			victims = append(victims, byte(o.Victim))
		}
	}
	// E: the scan list is empty, and the get list's LFU takes one of A B
	// (hit counts 0, the sample's first).
	if len(victims) != 3 || string(victims[:2]) != "ST" || (victims[2] != 'A' && victims[2] != 'B') {
		t.Errorf("victims %q: want S, T (the scan entries) and then a get entry", victims)
	}
}
