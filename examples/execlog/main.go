// Command execlog is a minimal user of the Kerby pool outside Kerby-KV: a
// tp_btf program (bpf/examples/execlog.bpf.c) stores, on every exec, the new
// program's file name as a variable-length pool object keyed by process id;
// this program loads it, runs a few commands, and prints pid -> file name,
// read back through the pool, with the pool's statistics.
//
//	execlog                       # run a few demo commands
//	execlog -- /bin/ls -l /       # run this command
//	execlog --duration 10s        # and log every exec on the machine for 10s (Ctrl-C stops)
package main

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel -type pool_op_args execlog ../../bpf/examples/execlog.bpf.c

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/cistern-ebpf/cistern/kernel"
	"github.com/cistern-ebpf/cistern/pool"
)

// Log is the loaded and attached exec logger.
type Log struct {
	objs execlogObjects
	tp   link.Link
}

// Start loads the program with the pool sized by cfg and attaches it.
func Start(cfg pool.Config) (*Log, error) {
	spec, err := loadExeclog()
	if err != nil {
		return nil, err
	}
	// Sets pool_block_size/pool_max_blocks and sizes pool_blocks, pool_zero,
	// pool_objects and both pool_staging buffers.
	if err := cfg.Apply(spec); err != nil {
		return nil, err
	}
	l := &Log{}
	if err := spec.LoadAndAssign(&l.objs, nil); err != nil {
		return nil, fmt.Errorf("load execlog: %w", err)
	}
	if l.tp, err = link.AttachTracing(link.TracingOptions{Program: l.objs.ExeclogExec}); err != nil {
		l.objs.Close()
		return nil, fmt.Errorf("attach tp_btf/sched_process_exec: %w", err)
	}
	return l, nil
}

// Close detaches and unloads.
func (l *Log) Close() {
	l.tp.Close()
	l.objs.Close()
}

// Name reads the file name stored for pid through the pool.
func (l *Log) Name(pid uint32) (string, error) {
	a := execlogPoolOpArgs{Id: uint64(pid)}
	if err := kernel.Call(l.objs.ExeclogRead, &a); err != nil {
		return "", err
	}
	if err := pool.RetError(a.Ret); err != nil {
		return "", err
	}
	buf := make([]byte, l.objs.PoolStaging.ValueSize())
	if err := l.objs.PoolStaging.Lookup(uint32(0), buf); err != nil {
		return "", err
	}
	return string(buf[:a.Ret]), nil
}

// Entry is one logged exec.
type Entry struct {
	PID  uint32
	Name string
}

// Entries lists every logged process, by pid.
func (l *Log) Entries() ([]Entry, error) {
	var pids []uint32
	err := pool.ForEachObject(l.objs.PoolObjects, func(id uint64, _ pool.Ref) bool {
		pids = append(pids, uint32(id))
		return true
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(pids)
	var out []Entry
	for _, pid := range pids {
		name, err := l.Name(pid)
		if errors.Is(err, pool.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		out = append(out, Entry{pid, name})
	}
	return out, nil
}

// Stats reads the pool statistics and the program's own counters.
func (l *Log) Stats() (st pool.Stats, stored, failed uint64, err error) {
	st, err = pool.CollectStats(pool.Maps{Index: l.objs.PoolIndex, Blocks: l.objs.PoolBlocks, Stats: l.objs.PoolStats},
		pool.ObjectRefs(l.objs.PoolObjects))
	if err == nil {
		err = errors.Join(l.objs.ExecsStored.Get(&stored), l.objs.ExecsFailed.Get(&failed))
	}
	return st, stored, failed, err
}

var demo = [][]string{{"/bin/true"}, {"/bin/sh", "-c", "/bin/echo hello >/dev/null"}, {"/usr/bin/env", "uname", "-r"}}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("execlog", flag.ContinueOnError)
	fs.SetOutput(out)
	dur := fs.Duration("duration", 0, "after the commands, keep logging every exec this long (Ctrl-C stops)")
	bs := fs.Uint("block-size", 32, "pool block size in bytes (multiple of 8, 16..4096)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmds := demo
	if fs.NArg() > 0 {
		cmds = [][]string{fs.Args()}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	l, err := Start(pool.Config{BlockSize: uint32(*bs), MaxBlocks: 8, CapacityBlocks: 1 << 14, MaxObjects: 4096})
	if err != nil {
		return err
	}
	defer l.Close()

	for _, c := range cmds {
		cmd := exec.Command(c[0], c[1:]...)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%v: %w", c, err)
		}
		fmt.Fprintf(out, "ran pid %d: %v\n", cmd.Process.Pid, c)
	}
	if *dur > 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(*dur):
		}
	}

	entries, err := l.Entries()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%8s  %s\n", "PID", "FILE")
	for _, e := range entries {
		fmt.Fprintf(out, "%8d  %s\n", e.PID, e.Name)
	}
	st, stored, failed, err := l.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "execs stored %d, failed %d; pool: %d objects, %d bytes in %d blocks of %d (efficiency %.2f), %d leaked\n",
		stored, failed, st.Objects, st.PayloadBytes, st.LiveBlocks, st.BlockSize, st.MemoryEfficiency, st.LeakedBlocks)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "execlog:", err)
		os.Exit(1)
	}
}
