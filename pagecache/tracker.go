package pagecache

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/percpu"
)

// trackStatNames are pc_track_stats, in enum pc_track_stat order.
var trackStatNames = []string{"events_add", "events_add_other_cgroup", "events_del", "events_read", "events_dropped", "events_del_own"}

// tracker is the loaded tracepoint object, its links and ring buffer.
type tracker struct {
	coll  *ebpf.Collection
	links []link.Link
	rd    *ringbuf.Reader
	files map[uint32]string // file id -> path
	pages int64             // pages the watched files span
}

// fileKey mirrors struct pc_file_key.
type fileKey struct {
	Ino uint64
	Dev uint32
	Pad uint32
}

// kernelDev turns a user-space dev_t into the kernel's s_dev encoding.
func kernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// openTracker loads the tracker for the memory cgroup memcg (kernfs id),
// registers the regular files under dir and attaches the tracepoints.
// With sample > 1 (a power of 2), one read in sample is reported.
func openTracker(dir string, memcg uint64, access bool, sample uint32) (*tracker, error) {
	spec, err := loadTrack()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["pc_memcg_id"].Set(memcg); err != nil {
		return nil, err
	}
	var acc uint32
	if access {
		acc = 1
	}
	if err := spec.Variables["pc_want_access"].Set(acc); err != nil {
		return nil, err
	}
	if sample == 0 {
		sample = 1
	}
	if err := spec.Variables["pc_access_mask"].Set(sample - 1); err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load page-cache tracker: %w", err)
	}
	t := &tracker{coll: coll, files: map[uint32]string{}}
	if err := t.addDir(dir); err != nil {
		t.Close()
		return nil, err
	}
	rd, err := ringbuf.NewReader(coll.Maps["pc_events"])
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.rd = rd
	progs := []string{"pc_add", "pc_del"}
	if access {
		progs = append(progs, "pc_read")
	}
	for _, name := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[name]})
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("attach %s: %w", name, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// addDir registers every regular file under dir (hard links once).
func (t *tracker) addDir(dir string) error {
	m := t.coll.Maps["pc_files"]
	seen := map[fileKey]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // unreadable below dir: not watched
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return nil
		}
		k := fileKey{Ino: st.Ino, Dev: kernelDev(st.Dev)}
		if seen[k] {
			return nil
		}
		seen[k] = true
		id := uint32(len(t.files) + 1)
		if err := m.Put(k, id); err != nil {
			return fmt.Errorf("watch %s: %w (at most %d files)", path, err, m.MaxEntries())
		}
		t.files[id] = path
		t.pages += (st.Size + 4095) / 4096
		return nil
	})
	if err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	if len(t.files) == 0 {
		return fmt.Errorf("--dir %s has no regular files to watch", dir)
	}
	return nil
}

func (t *tracker) stats() (map[string]uint64, error) {
	return percpu.Sum(t.coll.Maps["pc_track_stats"], trackStatNames)
}

// Close detaches the tracepoints first, so nothing is left behind.
func (t *tracker) Close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
	}
	t.coll.Close()
	return errors.Join(errs...)
}
