package pagecache

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/percpu"
	"github.com/cistern-ebpf/cistern/kernel"
)

// trackStatNames are pc_track_stats, in enum pc_track_stat order.
var trackStatNames = []string{"events_add", "events_add_other_cgroup", "events_del", "events_read", "events_dropped", "events_del_own", "events_read_more", "events_queued", "pages_added", "events_write"}

// tracker is the policy object's tracepoint programs, attached, and the
// directory watch (dirwatch.go) whose goroutine registers files created
// under the directory while the agent runs (at once: a file is usually
// created before its first write, and its pages count from then on). The
// object belongs to the policy (policy.go): the tracker only attaches.
type tracker struct {
	coll  *ebpf.Collection
	links []link.Link
	w     *dirWatch
	// The recording tracker (openTracker) owns its object and reads its
	// events from a ring buffer; the agent's reads none.
	rd   *ringbuf.Reader
	own  bool
	done chan struct{} // the watch goroutine has ended
	// access, sampled: what bind attached (attach), and resumeReads
	// attaches again after pauseReads.
	access, sampled bool

	mu    sync.Mutex         // files, ids, pages
	files map[uint32]string  // file id -> path (the latest name seen)
	ids   map[fileKey]uint32 // a hard link or a rename keeps its id
	pages int64              // pages the watched files spanned when registered

	nfiles, added, watchErrors atomic.Uint64
}

// fileKey mirrors struct pc_file_key (TestFileKeyLayout checks it against
// the tracker object's BTF).
type fileKey struct {
	Ino uint64
	Dev uint32
	Pad uint32
}

// kernelDev turns a user-space dev_t into the kernel's s_dev encoding.
func kernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// newTracker registers the regular files under dir in coll's pc_files and
// attaches coll's tracepoint programs (the read signal too when access;
// no deletes when sampled: auto's sampler needs the reads for its shadows
// and the folios added, for what the cgroup really loaded, its live
// check; until session 30 it attached the reads alone, and every live
// measure auto made was of nothing).
func newTracker(coll *ebpf.Collection, dir string, access, sampled bool) (*tracker, error) {
	t, err := scanTracker(dir)
	if err != nil {
		return nil, err
	}
	if err := t.bind(coll, access, sampled); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// scanTracker watches dir and finds its regular files, without an object
// to register them in yet: the agent walks the tree while its policy
// loads (the verifier's 0.5-1.8 s and the search tree's 78k files' walk,
// 0.6-1.3 s, were a switch's first two steps in a row).
func scanTracker(dir string) (_ *tracker, err error) {
	t := &tracker{files: map[uint32]string{}, ids: map[fileKey]uint32{}}
	if t.w, err = newDirWatch(dir); err != nil {
		return nil, fmt.Errorf("watch --dir %s: %w", dir, err)
	}
	if err := t.addDir(dir); err != nil {
		t.Close()
		return nil, fmt.Errorf("--dir %s: %w", dir, err)
	}
	return t, nil
}

// bind registers the files scanTracker found in coll's pc_files (one
// batch), starts registering new ones as they come, and attaches coll's
// programs (as newTracker says).
func (t *tracker) bind(coll *ebpf.Collection, access, sampled bool) error {
	t.mu.Lock()
	t.coll = coll
	keys, ids := make([]fileKey, 0, len(t.ids)), make([]uint32, 0, len(t.ids))
	for k, id := range t.ids {
		keys, ids = append(keys, k), append(ids, id)
	}
	err := t.registerAll(keys, ids)
	t.mu.Unlock()
	if err != nil {
		return err
	}
	t.done = make(chan struct{})
	go t.watch()
	t.access, t.sampled = access, sampled
	return t.attach()
}

// attach attaches pc_add, pc_del unless sampled (auto's sampler counts
// loads, not deletes), and the read signal if access.
func (t *tracker) attach() error {
	for _, name := range []string{"pc_add", "pc_del"} {
		if t.sampled && name == "pc_del" {
			continue
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: t.coll.Programs[name]})
		if err != nil {
			return fmt.Errorf("attach %s: %w", name, err)
		}
		t.links = append(t.links, l)
	}
	if t.access {
		if err := t.attachReads(); err != nil {
			return err
		}
	}
	return nil
}

// registerAll puts the files' ids in pc_files in one batch where the
// kernel has batch updates (5.6), else one by one.
func (t *tracker) registerAll(keys []fileKey, ids []uint32) error {
	m := t.coll.Maps["pc_files"]
	if len(keys) > int(m.MaxEntries()) {
		return fmt.Errorf("%d files: at most %d are watched", len(keys), m.MaxEntries())
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(keys, ids, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("register %d files: %w", len(keys), err)
	}
	for i, k := range keys {
		if err := m.Put(k, ids[i]); err != nil {
			return fmt.Errorf("watch %s: %w (at most %d files)", t.files[ids[i]], err, m.MaxEntries())
		}
	}
	return nil
}

// openTracker loads the recording tracker (track.bpf.c: every event to a
// ring buffer, no policy) for the memory cgroup memcg (kernfs id), with
// the read signal when access, one read in sample reported (a power of
// 2), and attaches it to dir's files.
func openTracker(dir string, memcg uint64, access bool, sample uint32) (*tracker, error) {
	return openTrackerOpts(dir, memcg, access, sample, 0)
}

// openTrackerOpts is openTracker with spatial sampling: with shardsBits >
// 0 only reads of pages whose key hashes into 1/2^shardsBits of the key
// space are reported (ShardsSampled), and only reads are (no adds and
// deletes).
func openTrackerOpts(dir string, memcg uint64, access bool, sample uint32, shardsBits uint) (*tracker, error) {
	spec, err := loadTrack()
	if err != nil {
		return nil, err
	}
	var acc uint32
	if access {
		acc = 1
	}
	vars := map[string]any{"pc_memcg_id": memcg, "pc_want_access": acc, "pc_access_mask": max(sample, 1) - 1,
		"pc_shards_threshold": shardsThreshold(shardsBits)}
	for k, v := range vars {
		if err := spec.Variables[k].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", k, err)
		}
	}
	keepPrograms(spec, access, shardsBits > 0)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, kernel.LoadError("the page-cache tracker", err)
	}
	rd, err := ringbuf.NewReader(coll.Maps["pc_events"])
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t, err := newTracker(coll, dir, access, shardsBits > 0)
	if err != nil {
		rd.Close()
		coll.Close()
		return nil, err
	}
	t.rd, t.own = rd, true
	return t, nil
}

// ReadSignal says where the access signal comes from on this kernel:
// mm_filemap_get_pages where it exists (Linux 6.10), else read(2) and
// pread64(2) (readv, sendfile and splice are not seen then).
func ReadSignal() string {
	if kernel.FilemapGetPages() == nil {
		return "mm_filemap_get_pages"
	}
	return "read/pread64 syscalls (no mm_filemap_get_pages: readv, sendfile and splice are not seen)"
}

// syscallReads makes attachReads take the read/pread64 variant even where
// mm_filemap_get_pages exists (tests).
var syscallReads bool

// keepPrograms drops from spec every program the agent neither attaches
// (bind) nor calls (a policy object's pc_start, pc_apply, evict_init).
// Each program is verified on its own, with what it calls inlined, and a
// page-cache policy object also holds replay's programs and both read
// signals: loading only what runs took a third off the verifier's time,
// which every agent start and each of auto's switches pays.
func keepPrograms(spec *ebpf.CollectionSpec, access, sampled bool) {
	keep := map[string]bool{"pc_start": true, "pc_apply": true, "evict_init": true, "pc_add": true}
	if !sampled {
		keep["pc_del"] = true
	}
	if access {
		for _, n := range readPrograms() {
			keep[n] = true
		}
		// auto's sampler (sampled) takes the reads alone: its shadows and
		// the kernel model are read-based.
		keep["pc_dirty"] = !sampled
	}
	for n := range spec.Programs {
		if !keep[n] {
			delete(spec.Programs, n)
		}
	}
}

// filemapReads: the access signal is mm_filemap_get_pages (ReadSignal).
func filemapReads() bool { return kernel.FilemapGetPages() == nil && !syscallReads }

// readPrograms names the programs of the access signal: the reads
// ReadSignal names, and the writes (pc_dirty: a folio made dirty).
func readPrograms() []string {
	if filemapReads() {
		return []string{"pc_read", "pc_dirty"}
	}
	return []string{"pc_sys_read", "pc_sys_pread", "pc_dirty"}
}

// attachReads attaches the access signal ReadSignal names, and the writes'
// (writeback_dirty_folio, in every kernel the agent loads on: 5.18 on)
// but for auto's sampler.
func (t *tracker) attachReads() error {
	if !t.sampled {
		l, err := link.AttachTracing(link.TracingOptions{Program: t.coll.Programs["pc_dirty"]})
		if err != nil {
			return fmt.Errorf("attach pc_dirty: %w", err)
		}
		t.links = append(t.links, l)
	}
	if filemapReads() {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "mm_filemap_get_pages", Program: t.coll.Programs["pc_read"]})
		if err != nil {
			return fmt.Errorf("attach pc_read: %w", err)
		}
		t.links = append(t.links, l)
		return nil
	}
	for name, tp := range map[string]string{"pc_sys_read": "sys_enter_read", "pc_sys_pread": "sys_enter_pread64"} {
		l, err := link.Tracepoint("syscalls", tp, t.coll.Programs[name], nil)
		if err != nil {
			return fmt.Errorf("attach %s: %w", name, err)
		}
		t.links = append(t.links, l)
	}
	return nil
}

// pauseReads detaches every program of auto's sampler (resting: nothing
// is sampled, the reads nor the loads); resumeReads attaches them again,
// the loads with the reads. Until session 31 it attached the reads
// alone: after auto's first rest the cgroup's loads were never counted
// again, and every live measure after it read zero loads.
func (t *tracker) pauseReads() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	return errors.Join(errs...)
}

func (t *tracker) resumeReads() error {
	if len(t.links) > 0 {
		return nil
	}
	return t.attach()
}

// addDir registers every regular file under dir (hard links once) and
// watches every directory for new ones. Directories it cannot read or
// watch are skipped and counted (watch_errors).
func (t *tracker) addDir(dir string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.w.Add(dir); err != nil {
		return err
	}
	return t.walk(dir, true)
}

// walk registers dir's regular files and watches and walks its
// subdirectories (t.mu held). Each file is looked at relative to its
// directory (fstatat): from the root, the path lookups were a fifth of
// registering the search's tree.
func (t *tracker) walk(dir string, root bool) error {
	d, err := os.Open(dir)
	if err != nil {
		if root {
			return err
		}
		t.watchErrors.Add(1)
		return nil // unreadable below the root: not watched
	}
	defer d.Close()
	ents, rerr := d.ReadDir(-1)
	// In name order, as filepath.WalkDir: a file's id is its place in
	// the walk.
	slices.SortFunc(ents, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	fd := int(d.Fd())
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if err := t.w.Add(path); err != nil {
				t.watchErrors.Add(1)
			}
			if err := t.walk(path, false); err != nil {
				return err
			}
		case e.Type().IsRegular():
			var st unix.Stat_t
			if unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone since listed
			}
			if err := t.addStat(path, &st); err != nil {
				return err
			}
		}
	}
	if rerr != nil {
		if root {
			return rerr
		}
		t.watchErrors.Add(1)
	}
	return nil
}

// spanPages is how many pages the files registered so far span.
func (t *tracker) spanPages() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pages
}

// path is the name of file id ("" if unknown).
// fileList is a copy of the watched files by id.
func (t *tracker) fileList() map[uint32]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.files)
}

func (t *tracker) path(id uint32) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.files[id]
}

// addFile registers one regular file (t.mu held); a file already known
// (another link, or renamed) only takes the new name.
func (t *tracker) addFile(path string) error {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return nil
	}
	return t.addStat(path, &st)
}

// addStat registers the file st describes (t.mu held); before bind, only
// its id is kept (bind registers them all at once).
func (t *tracker) addStat(path string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	k := fileKey{Ino: st.Ino, Dev: kernelDev(st.Dev)}
	if id, ok := t.ids[k]; ok {
		t.files[id] = path
		return nil
	}
	id := uint32(len(t.files) + 1)
	if t.coll != nil {
		m := t.coll.Maps["pc_files"]
		if err := m.Put(k, id); err != nil {
			return fmt.Errorf("watch %s: %w (at most %d files)", path, err, m.MaxEntries())
		}
	}
	t.ids[k] = id
	t.files[id] = path
	t.pages += (st.Size + 4095) / 4096
	t.nfiles.Store(uint64(len(t.files)))
	return nil
}

// watch registers what is created (or moved in) under the directory until
// the watcher closes. Pages a file gained before it was registered are not
// tracked (the kernel reclaims them as usual).
func (t *tracker) watch() {
	defer close(t.done)
	for {
		select {
		case ev, ok := <-t.w.Events:
			if !ok {
				return
			}
			n := t.nfiles.Load()
			var err error
			if ev.Dir {
				err = t.addDir(ev.Path) // with files made before the watch took
			} else {
				t.mu.Lock()
				err = t.addFile(ev.Path)
				t.mu.Unlock()
			}
			if err != nil {
				t.watchErrors.Add(1)
			}
			t.added.Add(t.nfiles.Load() - n)
		case _, ok := <-t.w.Errors: // a queue overflow loses creations
			if !ok {
				return
			}
			t.watchErrors.Add(1)
		}
	}
}

func (t *tracker) stats() (map[string]uint64, error) {
	st, err := percpu.Sum(t.coll.Maps["pc_track_stats"], trackStatNames)
	if err != nil {
		return nil, err
	}
	st["files_watched"] = t.nfiles.Load()
	st["files_added_while_running"] = t.added.Load()
	st["watch_errors"] = t.watchErrors.Load()
	return st, nil
}

// Close detaches the tracepoints and ends the watch (the agent's object is
// the policy's to close; the recording tracker closes its own).
func (t *tracker) Close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	if t.w != nil {
		errs = append(errs, t.w.Close())
		if t.done != nil {
			<-t.done
		}
		t.w = nil
	}
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
		t.rd = nil
	}
	if t.own {
		t.coll.Close()
		t.own = false
	}
	return errors.Join(errs...)
}

// shardsMul is PC_SHARDS_MUL: 2^64 / the golden ratio.
const shardsMul = 0x9E3779B97F4A7C15

// shardsThreshold is pc_shards_threshold for a rate of 1/2^bits (0: every
// page).
func shardsThreshold(bits uint) uint64 {
	if bits == 0 || bits >= 64 {
		return 0
	}
	return 1 << (64 - bits)
}

// ShardsSampled reports whether the page key (file << 32 | index) is in
// the 1/2^bits sample the tracker reports (as pc_sampled in the kernel).
func ShardsSampled(key uint64, bits uint) bool {
	return bits == 0 || key*shardsMul < shardsThreshold(bits)
}
