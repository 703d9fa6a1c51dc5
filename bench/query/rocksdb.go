package querybench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/bench/queryref"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// The rocksdb workload (--workload rocksdb): the verifier-safe-DSL paper
// measured its optimizer's probe effect on RocksDB. db_bench readrandom,
// one thread, uniform keys, on a 1 GiB database read once into the page
// cache, block cache 8 MiB: almost every Get is a pread64 served from the
// page cache, a syscall-heavy CPU-bound load like fio's.

// rocksdbBytes is the database's size (the same one `bench pagecache
// --workload rocksdb --quick` uses, built once into the cache dir).
const rocksdbBytes = 1 << 30

// load is the traced workload: fio on file, or db_bench on db.
type load struct {
	file string
	db   *servers.RocksDB
}

// loadRun is a started workload run.
type loadRun interface{ wait() (fioResult, error) }

func (l load) start(ctx context.Context, cg *queryref.Cgroup, runtime time.Duration) (loadRun, error) {
	if l.db != nil {
		return startDBBench(ctx, cg, l.db, runtime)
	}
	return startFio(ctx, cg, l.file, runtime)
}

// prepareRocksDB builds (once) the database and reads it into the page cache.
func prepareRocksDB(ctx context.Context, cacheDir string, progress func(string)) (*servers.RocksDB, error) {
	db, err := servers.PrepareRocksDB(ctx, servers.RocksDBOptions{CacheDir: cacheDir, Bytes: rocksdbBytes, Progress: progress})
	if err != nil {
		return nil, err
	}
	files, size, err := db.Files()
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("rocksdb: reading the database (%d MiB) into the page cache", size>>20))
	buf := make([]byte, 1<<20)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		for {
			n, err := f.Read(buf)
			if n == 0 || err != nil {
				break
			}
		}
		f.Close()
	}
	return db, nil
}

// dbRun is one db_bench readrandom run in the bench's cgroup.
type dbRun struct {
	cmd       *exec.Cmd
	out, errb bytes.Buffer
	// syscr0: the process's syscr when execve returned. The kernel reads
	// the program's and the interpreter's headers with kernel_read, which
	// counts in syscr (5 for db_bench) though no syscall is made.
	syscr0 uint64
}

func startDBBench(ctx context.Context, cg *queryref.Cgroup, db *servers.RocksDB, dur time.Duration) (*dbRun, error) {
	cmd, err := db.Command(ctx, servers.DBBenchRun{Benchmark: "readrandom", Threads: 1, Duration: dur})
	if err != nil {
		return nil, err
	}
	d := &dbRun{cmd: cmd}
	cmd.Stdout, cmd.Stderr = &d.out, &d.errb
	// Born in the cgroup (CLONE_INTO_CGROUP), as fio; stopped by ptrace
	// when execve returns, to read syscr before its first own read.
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.FD
	cmd.SysProcAttr.Ptrace = true
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("db_bench: %w", err)
	}
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("db_bench did not stop at exec (%v, status %v)", err, ws)
	}
	d.syscr0, err = readSyscr(pid)
	if derr := unix.PtraceDetach(pid); err == nil {
		err = derr
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("db_bench at exec: %w", err)
	}
	return d, nil
}

// wait returns db_bench's Gets as ops, its read syscalls (the kernel's
// syscr of the whole process, read before it is reaped) as totalIOs, and
// its CPU time.
func (d *dbRun) wait() (fioResult, error) {
	pid := d.cmd.Process.Pid
	var info unix.Siginfo
	var syscr uint64
	var ioErr error
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err == nil {
		syscr, ioErr = readSyscr(pid)
	} else {
		ioErr = err
	}
	if err := d.cmd.Wait(); err != nil {
		return fioResult{}, fmt.Errorf("db_bench: %v: %s", err, benchkit.FirstLine(d.errb.String()))
	}
	if ioErr != nil {
		return fioResult{}, fmt.Errorf("db_bench's read syscalls: %w", ioErr)
	}
	res, err := servers.ParseDBBench(d.out.String(), "readrandom")
	if err != nil {
		return fioResult{}, err
	}
	ru, _ := d.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	var cpu float64
	if ru != nil {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return fioResult{iops: res.OpsPerSec, ops: uint64(res.Ops), totalIOs: syscr - min(d.syscr0, syscr), cpuSec: cpu, mainPID: pid, onlyPID: true}, nil
}

// readSyscr reads syscr (read, pread64, readv, preadv: every call that
// reached vfs_read and its kin) from /proc/PID/io.
func readSyscr(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no syscr in /proc/%d/io", pid)
}
