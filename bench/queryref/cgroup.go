package queryref

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// Cgroup is a cgroup v2 made for one workload: every mode filters on its
// id, so all of them see exactly the workload's tasks and nothing else.
type Cgroup struct {
	Path string
	ID   uint64 // what bpf_get_current_cgroup_id returns for its tasks
	FD   int    // for exec.Cmd SysProcAttr.CgroupFD (CLONE_INTO_CGROUP)
}

// NewCgroup creates a fresh cgroup named name under the cgroup2 mount.
func NewCgroup(name string) (*Cgroup, error) {
	pts := mounts.MountPoints("cgroup2")
	if len(pts) == 0 {
		return nil, fmt.Errorf("no cgroup2 filesystem mounted (the workload filter needs one)")
	}
	p := filepath.Join(pts[0], name)
	_ = os.Remove(p) // left over from an interrupted run
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
	if err != nil || len(h.Bytes()) < 8 {
		os.Remove(p)
		return nil, fmt.Errorf("cgroup id of %s: %v", p, err)
	}
	fd, err := unix.Open(p, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(p)
		return nil, err
	}
	return &Cgroup{Path: p, ID: binary.LittleEndian.Uint64(h.Bytes()), FD: fd}, nil
}

// Remove deletes the cgroup once its tasks are gone (they may take a moment
// to leave after being reaped).
func (c *Cgroup) Remove() error {
	unix.Close(c.FD)
	var err error
	for i := 0; i < 100; i++ {
		if err = os.Remove(c.Path); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}
