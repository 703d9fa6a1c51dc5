package pagecache

import (
	"testing"

	"github.com/cistern-ebpf/cistern/evict"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestApplyCountsEachReadOnce runs pc_apply of the policies on a batch as
// mm_filemap_get_pages reports it: one read(2) of 32 new pages is two
// events, [0, 31] and its later batch [31, 31], with one read number. The
// read that brought the pages in is no hit (first-read policies) and the
// repeated page is no hit either; a second read of the 32 pages is 32 hits.
// Events without a read number (read/pread64 on kernels before 6.10) are
// each a read of their own.
func TestApplyCountsEachReadOnce(t *testing.T) {
	testenv.RequireRoot(t)
	for _, name := range []string{"lhd", "lfu", "s3fifo", "wtinylfu", "lru", "get-scan"} {
		t.Run(name, func(t *testing.T) {
			row, err := evict.Lookup(name, evict.PageCache)
			if err != nil {
				t.Fatal(err)
			}
			p, err := openPolicy(row, 1<<16, trackConfig{sample: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var evs []Event
			for i := range 32 {
				evs = append(evs, Event{Op: opAdd, File: 1, Index: uint64(i), TID: 100, TGID: 100})
			}
			acc := func(index, nr uint64, read uint32) Event {
				return Event{Op: opAcc, File: 1, Index: index, Nr: uint32(nr), TID: 100, TGID: 100, Read: read}
			}
			step := func(want map[string]uint64, evs ...Event) {
				t.Helper()
				if _, _, err := p.run(evs, 0); err != nil {
					t.Fatal(err)
				}
				st, err := p.stats()
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range want {
					if st[k] != v {
						t.Errorf("%s %d, want %d (stats %v)", k, st[k], v, st)
					}
				}
			}
			first := row.FirstRead
			w := map[string]uint64{"acc_hits": 32, "first_reads": 0, "read_again": 1}
			if first {
				w = map[string]uint64{"acc_hits": 0, "first_reads": 32, "read_again": 1}
			}
			step(w, append(evs, acc(0, 32, 7), acc(31, 1, 7))...)
			w["acc_hits"] += 32
			w["read_again"] += 17
			step(w, acc(0, 32, 8), acc(16, 16, 8), acc(31, 1, 8))
			w["acc_hits"] += 2
			step(w, acc(3, 1, 0), acc(3, 1, 0))
		})
	}
}
