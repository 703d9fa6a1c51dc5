package pagecachebench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// pcRAMDisk mounts an ext4 file system on a loop device backed by a file in
// /dev/shm at dir, and returns how to undo it.
//
// Why (--getscan-ramdisk, a diagnostic): on the shared VM's disk the scan
// ran anywhere from 9 MB/s to 1.9 GB/s from one round to the next and a
// GET miss cost from tens of microseconds to milliseconds, so get_speedup
// swung from 1.07 to 29 between rounds. On a RAM-backed device a miss still
// goes through the block layer (bio, loop worker, copy) but costs a few
// microseconds in every round: there the kernel LRU's few misses barely
// matter and get_speedup is about 1.0. The speedup is the price of a miss
// on the disk, which is why the default stays on the disk.
func pcRAMDisk(dir string, bytes int64) (undo func(), err error) {
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not installed (util-linux, e2fsprogs): %w", tool, err)
		}
	}
	img := filepath.Join("/dev/shm", fmt.Sprintf("cistern-bench-pagecache-%d.img", os.Getpid()))
	var steps []func()
	undo = func() {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	f, err := os.Create(img)
	if err != nil {
		return nil, err
	}
	steps = append(steps, func() { os.Remove(img) })
	// Room for the files plus ext4's own metadata and journal.
	if err := errors.Join(f.Truncate(bytes+bytes/8+(64<<20)), f.Close()); err != nil {
		return nil, err
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %w", img, err)
	}
	dev := strings.TrimSpace(string(out))
	steps = append(steps, func() { exec.Command("losetup", "-d", dev).Run() })
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 %s: %v: %s", dev, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("mount", dev, dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mount %s: %v: %s", dev, err, out)
	}
	steps = append(steps, func() { exec.Command("umount", dir).Run() })
	return undo, nil
}
