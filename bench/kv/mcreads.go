package kvbench

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel mcreads ../../bpf/kvbench/mcreads.bpf.c

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// mcCounter counts memcached's read(2) calls, those that found nothing
// (EAGAIN), and its threads' wake-ups: the functional counts of the TCP
// path's two kernel behaviours (docs/kerby-kv.md), which hold in a TCG
// guest where timings do not.
type mcCounter struct {
	pid  int
	objs mcreadsObjects
	tp   link.Link
}

// mcCounts are the counts since the counter started.
type mcCounts struct {
	Reads, EAGAIN, Wakeups uint64
}

func newMCCounter(pid int) (*mcCounter, error) {
	spec, err := loadMcreads()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["target_tgid"].Set(uint32(pid)); err != nil {
		return nil, err
	}
	// The tracepoint is found through tracefs, which a fresh machine or a
	// matrix guest may not have mounted.
	if _, err := mounts.Ensure(mounts.Tracefs); err != nil {
		return nil, fmt.Errorf("memcached read counter: %w", err)
	}
	c := &mcCounter{pid: pid}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("memcached read counter: %w", err)
	}
	if c.tp, err = link.Tracepoint("syscalls", "sys_exit_read", c.objs.McReadExit, nil); err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("memcached read counter: %w", err)
	}
	return c, nil
}

// counts reads the counters and the wake-ups: each voluntary context
// switch of memcached's threads is a sleep that a wake-up ended.
func (c *mcCounter) counts() (mcCounts, error) {
	var out mcCounts
	for i, dst := range []*uint64{&out.Reads, &out.EAGAIN} {
		var per []uint64
		if err := c.objs.McCounts.Lookup(uint32(i), &per); err != nil {
			return out, err
		}
		for _, v := range per {
			*dst += v
		}
	}
	w, err := voluntarySwitches(c.pid)
	out.Wakeups = w
	return out, err
}

func (c *mcCounter) close() {
	c.tp.Close()
	c.objs.Close()
}

// voluntarySwitches sums voluntary_ctxt_switches over memcached's worker
// threads (mc-worker; every thread if none is named so): its clock and LRU
// threads wake on timers, not for connections.
func voluntarySwitches(pid int) (uint64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no threads of %d in /proc", pid)
	}
	var all, workers uint64
	named := false
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that exited
		}
		worker := false
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Name:"); ok && strings.TrimSpace(v) == "mc-worker" {
				worker, named = true, true
			}
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				all += x
				if worker {
					workers += x
				}
			}
		}
	}
	if named {
		return workers, nil
	}
	return all, nil
}

func (a mcCounts) sub(b mcCounts) mcCounts {
	return mcCounts{a.Reads - b.Reads, a.EAGAIN - b.EAGAIN, a.Wakeups - b.Wakeups}
}
