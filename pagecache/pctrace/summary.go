package pctrace

// Summary is what a trace says about the run it recorded; the counts are
// of the measured part (after the warm-up Accesses was given).
type Summary struct {
	Events      uint64 `json:"events"`
	WarmupReads uint64 `json:"warmup_reads"` // read calls before the measured part
	Reads       uint64 `json:"reads"`        // read calls (batches of one read(2) count once)
	PageReads   uint64 `json:"page_reads"`   // pages those reads were served from
	PagesLoaded uint64 `json:"pages_loaded"` // pages added to the cache
	PagesGone   uint64 `json:"pages_gone"`   // pages deleted from it (reclaim, eviction, truncation)
	// PagesAddedOutsideReads: of PagesLoaded, the pages no read's range
	// holds (writes, readahead past the read): AccessesAt with adds only.
	PagesAddedOutsideReads uint64 `json:"pages_added_outside_reads,omitempty"`
	// PagesWritten: pages of write records (FlagWrite) AccessesAt with
	// adds put in the sequence as accesses (a write's own add's excepted).
	PagesWritten uint64 `json:"pages_written,omitempty"`
	// FirstReadsSkipped: the page reads AccessesAt with adds left out as
	// the first access of a page added outside a read (the add is that
	// access, as pc_skip_first_read makes it live).
	FirstReadsSkipped uint64 `json:"first_reads_skipped,omitempty"`
	// MaxResident is the most pages of watched files the cgroup held at
	// once (added minus deleted since the trace began; the pages cached
	// before it began are not counted): the cache size the run had.
	MaxResident uint64 `json:"max_resident_pages"`
	Files       int    `json:"files"`
}

// LoadedPer1000Reads is the live figure simulations are compared with.
func (s Summary) LoadedPer1000Reads() float64 {
	if s.Reads == 0 {
		return 0
	}
	return 1000 * float64(s.PagesLoaded) / float64(s.Reads)
}

// Key is the policy key of a page: file << 32 | index.
func Key(file uint32, index uint64) uint64 { return uint64(file)<<32 | uint64(uint32(index)) }

// maxReadPages bounds the pages one read record expands to (the agent's
// policies look up at most this many: PC_MAX_ACC_PAGES is 64; a trace
// keeps the whole range, up to this bound).
const maxReadPages = 1 << 16

// Accesses expands the trace's reads into one key per page access, in
// order, as the agent's policies see them: the later page batches of one
// read(2) (same thread and read number) do not access again the pages
// that read already touched. The first warm (a fraction, 0 to <1) of the
// read calls warm the cache: keys[from:] are the measured accesses, and
// the summary counts reads and pages loaded from there on (a cold start
// is every policy's misses alike).
func Accesses(evs []Event, warm float64) (keys []uint64, from int, s Summary) {
	warmReads := uint64(float64(countReads(evs)) * min(max(warm, 0), 0.99))
	return accesses(evs, warmReads, -1, nil)
}

// AccessesAt is Accesses with the measured part from event at on (the
// events before it were the warm-up: a boundary taken from the recorder's
// counters while nothing ran is exact, where a share of the reads is
// not), and, with adds, the pages added outside a read put in the
// sequence as accesses where they were added: a write's pages (RocksDB's
// WAL, its flushes' and compactions' new files), readahead beyond the
// range a read asked for. Replayed, a policy's misses are then the pages
// it would have added to the cache, reads' and writes' alike (a new page
// misses under any policy): the count the tracker gives live
// (pages_added), where the reads alone give only the reads' misses.
// Summary.PagesAddedOutsideReads counts the measured part's.
//
// With adds, the writes (FlagWrite: a folio made dirty) are accesses too,
// as the agent's policies hear them, and as there, the first access of a
// page after an add outside a read is not one: the agent's frequency
// policies take a folio's first read after its add as the read that added
// it (pc_skip_first_read), and a write that adds a folio dirties it right
// after. Without adds the sequence is the reads alone.
//
// An add is a read's when the next read event of the same thread is of
// the same file and its range holds the added folio: mm_filemap_get_pages
// fires after the read's folios were added. Where the read signal is the
// read(2)/pread64(2) syscalls (kernels before 6.10) the read comes first
// and its adds count as outside it: the same misses, the page accessed
// twice.
func AccessesAt(evs []Event, at int, adds bool) (keys []uint64, from int, s Summary) {
	var outside []bool
	if adds {
		outside = addsOutsideReads(evs)
	}
	return accesses(evs, 0, max(at, 0), outside)
}

// addsOutsideReads marks each add event that no read of its thread
// claims (AccessesAt).
func addsOutsideReads(evs []Event) []bool {
	out := make([]bool, len(evs))
	next := map[uint32]Event{} // per thread: its next read event
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		switch e.Op {
		case OpRead:
			if e.Flags&FlagWrite == 0 { // a write claims no add
				next[e.TID] = e
			}
		case OpAdd:
			r, ok := next[e.TID]
			last := e.Index + 1<<(e.Order&15) - 1
			out[i] = !ok || r.File != e.File || last < r.Index || e.Index >= r.Index+uint64(max(r.Nr, 1))
		}
	}
	return out
}

// accesses is Accesses (at < 0: the measured part from read call
// warmReads+1 on) and AccessesAt (at >= 0: from event at on; outside, when
// not nil, marks the adds to put in the sequence).
func accesses(evs []Event, warmReads uint64, at int, outside []bool) (keys []uint64, from int, s Summary) {
	s.WarmupReads = warmReads
	var calls uint64
	measuring := at == 0 || at < 0 && s.WarmupReads == 0
	// Per thread: its current read and the pages it touched (reads of
	// other threads interleave with a read's batches).
	type readState struct {
		read uint32
		seen map[uint64]struct{}
	}
	reads := map[uint32]*readState{}
	files := map[uint32]struct{}{}
	// fresh: pages added outside a read and not accessed since (AccessesAt).
	fresh := map[uint64]struct{}{}
	var resident int64
	for i, e := range evs {
		if at > 0 && i == at && !measuring {
			measuring = true
			from = len(keys)
			s.WarmupReads = calls
		}
		s.Events++
		files[e.File] = struct{}{}
		switch e.Op {
		case OpAdd:
			n := uint64(1) << (e.Order & 15)
			if measuring {
				s.PagesLoaded += n
			}
			resident += int64(n)
			if resident > 0 && uint64(resident) > s.MaxResident {
				s.MaxResident = uint64(resident)
			}
			if outside != nil && outside[i] {
				if measuring {
					s.PagesAddedOutsideReads += n
				}
				for p := uint64(0); p < n; p++ {
					keys = append(keys, Key(e.File, e.Index+p))
					fresh[Key(e.File, e.Index+p)] = struct{}{}
				}
			}
		case OpDel:
			n := uint64(1) << (e.Order & 15)
			if measuring {
				s.PagesGone += n
			}
			if len(fresh) > 0 {
				for p := uint64(0); p < n; p++ {
					delete(fresh, Key(e.File, e.Index+p))
				}
			}
			resident -= int64(n)
		case OpRead:
			if e.Flags&FlagWrite != 0 {
				if outside == nil {
					continue // the reads alone
				}
				for p := uint64(0); p < uint64(min(max(e.Nr, 1), maxReadPages)); p++ {
					k := Key(e.File, e.Index+p)
					if _, ok := fresh[k]; ok {
						delete(fresh, k)
						continue
					}
					if measuring {
						s.PagesWritten++
					}
					keys = append(keys, k)
				}
				continue
			}
			st := reads[e.TID]
			if st == nil {
				st = &readState{seen: map[uint64]struct{}{}}
				reads[e.TID] = st
			}
			if e.Read == 0 || e.Read != st.read {
				calls++
				if !measuring && at < 0 && calls > s.WarmupReads {
					measuring = true
					from = len(keys)
				}
				if measuring {
					s.Reads++
				}
				st.read = e.Read
				clear(st.seen)
			}
			nr := min(max(e.Nr, 1), maxReadPages)
			for p := uint64(0); p < uint64(nr); p++ {
				k := Key(e.File, e.Index+p)
				if e.Read != 0 {
					if _, dup := st.seen[k]; dup {
						continue
					}
					st.seen[k] = struct{}{}
				}
				if measuring {
					s.PageReads++
				}
				if _, ok := fresh[k]; ok && outside != nil {
					delete(fresh, k)
					if measuring {
						s.FirstReadsSkipped++
					}
					continue
				}
				keys = append(keys, k)
			}
		}
	}
	s.Files = len(files)
	if !measuring {
		from = len(keys)
		if at > 0 {
			s.WarmupReads = calls
		}
	}
	return keys, from, s
}

// countReads counts read calls as Accesses does.
func countReads(evs []Event) uint64 {
	last := map[uint32]uint32{}
	var n uint64
	for _, e := range evs {
		if e.Op != OpRead || e.Flags&FlagWrite != 0 {
			continue
		}
		if r, ok := last[e.TID]; e.Read == 0 || !ok || r != e.Read {
			n++
		}
		last[e.TID] = e.Read
	}
	return n
}
