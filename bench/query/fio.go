package querybench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/bench/queryref"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// queryFileSize is the fio file: small enough to stay in the page cache on
// any machine, large enough that 4 KiB random reads are not all in L2.
const queryFileSize = 64 << 20

// prepareFioFile writes the file fio reads and reads it once, so every
// later pread is served from the page cache (fio runs with invalidate=0).
func prepareFioFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := 0; off < queryFileSize; off += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, f)
	return err
}

// fioResult is one fio run's own account of itself.
type fioResult struct {
	iops     float64
	totalIOs uint64  // reads completed: one pread64 each with psync
	cpuSec   float64 // the job's CPU time (user+system); BPF programs run in it
	mainPID  int     // fio's parent; its job runs in a child process
	// ops: the workload's operations when they are not its reads (db_bench's
	// Gets; 0: totalIOs). onlyPID: the workload is mainPID alone, and its
	// Q2 rows are its read syscalls of every kind (db_bench); otherwise
	// they are the pread64 rows of every pid but mainPID (fio's job).
	ops     uint64
	onlyPID bool
}

// perCPU is reads per CPU second: throughput at equal CPU, which a shared
// machine's load does not move the way it moves IOPS.
func (r fioResult) perCPU() float64 {
	if r.cpuSec <= 0 {
		return 0
	}
	if r.ops > 0 {
		return float64(r.ops) / r.cpuSec
	}
	return float64(r.totalIOs) / r.cpuSec
}

// fio is a started fio job in the bench's cgroup.
type fio struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	errb bytes.Buffer
}

func startFio(ctx context.Context, cg *queryref.Cgroup, file string, runtime time.Duration) (*fio, error) {
	bin, err := exec.LookPath("fio")
	if err != nil {
		return nil, fmt.Errorf("fio %w: run sudo make deps", servers.ErrNotInstalled)
	}
	secs := strconv.Itoa(max(1, int(runtime.Round(time.Second).Seconds())))
	f := &fio{}
	f.cmd = exec.CommandContext(ctx, bin, "--name=qb", "--filename="+file, "--size="+strconv.Itoa(queryFileSize),
		"--rw=randread", "--bs=4k", "--ioengine=psync", "--invalidate=0", "--time_based", "--runtime="+secs,
		"--numjobs=1", "--output-format=json")
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.errb
	// Born in the cgroup (CLONE_INTO_CGROUP): every mode sees it from its
	// first syscall, and only it.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD}
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("fio: %w", err)
	}
	return f, nil
}

func (f *fio) wait() (fioResult, error) {
	err := f.cmd.Wait()
	if err != nil {
		return fioResult{}, fmt.Errorf("fio: %v: %s", err, benchkit.FirstLine(f.errb.String()))
	}
	out := f.out.Bytes()
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:] // fio may print notes before its JSON
	}
	var doc struct {
		Jobs []struct {
			UsrCPU     float64 `json:"usr_cpu"` // percent of job_runtime
			SysCPU     float64 `json:"sys_cpu"`
			JobRuntime float64 `json:"job_runtime"` // ms
			Read       struct {
				IOPS     float64 `json:"iops"`
				TotalIOs uint64  `json:"total_ios"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Jobs) != 1 {
		return fioResult{}, fmt.Errorf("fio output not understood (%v): %.200s", err, f.out.String())
	}
	j := doc.Jobs[0]
	return fioResult{iops: j.Read.IOPS, totalIOs: j.Read.TotalIOs, mainPID: f.cmd.Process.Pid,
		cpuSec: (j.UsrCPU + j.SysCPU) / 100 * j.JobRuntime / 1000}, nil
}
