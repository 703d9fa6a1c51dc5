package capturebench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/mounts"
)

// The attach mode (issue #26): how long from a process's exec (or its
// open of a libssl) to the uprobes attached on its file, and what
// --hold-new adds to a process's start. Each exec is of a new file, a copy
// no capture has seen, so every one goes the whole way: announced by the
// kernel, read (from the build-id cache after the first), attached.
//   - Go: a small Go program linking crypto/tls, built once from
//     attachGoSource with the Go toolchain, copied anew for each exec;
//   - openssl: `openssl version` with LD_LIBRARY_PATH naming a new directory
//     holding a new copy of libssl.so.3.
// Each round runs both kinds attachExecs/rounds times (>= 200 execs of each
// in all) under three variants, one after the other: no capture, a capture
// of the processes' cgroup, and the same with --hold-new. Reported: the
// exec-to-attached latency (median, p99) of the capture variant, pooled
// over the rounds; start-to-exit time of each process per variant (median),
// and the hold's addition.

const attachExecs = 200

const attachGoSource = `package main

import (
	"crypto/tls"
	"net"
	"os"
)

// Links crypto/tls's (*Conn).Write, Read and Close, and exits at once.
func main() {
	if len(os.Args) > 3 {
		var c net.Conn = tls.Client(nil, &tls.Config{})
		c.Write(nil)
		c.Read(nil)
		c.Close()
	}
}
`

type attachResult struct {
	goLat, sslLat     []float64            // ms, capture variant
	start             map[string][]float64 // "<kind> <variant>" -> ms
	holdTimeouts      float64
	unread, cpuPct    float64
	execSecs          float64 // the captured variant's execs
	attachErrors      float64
	lastError         string
	goCached, goFirst float64 // Go attachments from the cache, and not
}

// attachScratch is a directory on tmpfs when there is one (the copies are
// written and removed hundreds of times).
func attachScratch() (string, error) {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "cistern-attach-"); err == nil {
			return d, nil
		}
	}
	return os.MkdirTemp("", "cistern-attach-")
}

// buildAttachGo builds attachGoSource once per source (a go build takes a
// minute on a loaded machine): kept in the temporary directory, named by
// the source's hash.
func buildAttachGo(ctx context.Context) (string, error) {
	sum := sha256.Sum256([]byte(attachGoSource))
	dir := filepath.Join(os.TempDir(), "cistern-attachgo-"+hex.EncodeToString(sum[:6]))
	out := filepath.Join(dir, "attachgo")
	if st, err := os.Stat(out); err == nil && st.Mode().IsRegular() {
		return out, nil
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(attachGoSource), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module attachgo\n\ngo 1.21\n"), 0o644); err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("attach mode: the Go toolchain builds its Go program: %w", err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", out+".tmp", ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("attach mode: go build: %v: %s", err, b)
	}
	return out, os.Rename(out+".tmp", out)
}

func copyExe(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// libSSLOf is the libssl.so.3 a binary links (ldd).
func libSSLOf(bin string) (string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %w", bin, err)
	}
	for _, l := range splitLines(string(out)) {
		var name, arrow, path string
		if n, _ := fmt.Sscan(l, &name, &arrow, &path); n == 3 && len(name) > 9 && name[:9] == "libssl.so" {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s links no libssl", bin)
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// runAttach runs one round of the attach mode: n execs of each kind per
// variant.
func runAttach(ctx context.Context, n int) (attachResult, error) {
	r := attachResult{start: map[string][]float64{}}
	dir, err := attachScratch()
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	goBin, err := buildAttachGo(ctx)
	if err != nil {
		return r, err
	}
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		return r, fmt.Errorf("attach mode: %w", err)
	}
	lib, err := libSSLOf(openssl)
	if err != nil {
		return r, err
	}
	roots := mounts.MountPoints("cgroup2")
	if len(roots) == 0 {
		return r, fmt.Errorf("attach mode: no cgroup v2")
	}
	cg := filepath.Join(roots[0], fmt.Sprintf("cistern-attach-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		return r, err
	}
	defer func() { // an exited child may leave the group a moment later
		for i := 0; i < 100 && os.Remove(cg) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	cgf, err := os.Open(cg)
	if err != nil {
		return r, err
	}
	defer cgf.Close()
	seq := 0
	var c *capture.Capture
	// one runs one exec of kind on a new file and returns its start-to-exit time.
	one := func(kind string) (float64, error) {
		seq++
		var cmd *exec.Cmd
		var tidy string
		if kind == "go" {
			p := filepath.Join(dir, "g"+strconv.Itoa(seq))
			if err := copyExe(goBin, p, 0o755); err != nil {
				return 0, err
			}
			tidy = p
			cmd = exec.CommandContext(ctx, p)
		} else {
			d := filepath.Join(dir, "l"+strconv.Itoa(seq))
			if err := os.Mkdir(d, 0o755); err != nil {
				return 0, err
			}
			if err := copyExe(lib, filepath.Join(d, filepath.Base(lib)), 0o644); err != nil {
				return 0, err
			}
			tidy = d
			cmd = exec.CommandContext(ctx, openssl, "version")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d)
		}
		defer os.RemoveAll(tidy)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgf.Fd())}
		n0 := 0
		if c != nil {
			n0 = len(c.AttachSamples())
		}
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %v: %s", cmd.Path, err, out)
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		// One exec at a time: its file stays until it is attached (or 10 s),
		// so each latency is the exec's own, not a queue's.
		for end := time.Now().Add(10 * time.Second); c != nil && len(c.AttachSamples()) == n0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		return ms, nil
	}
	for _, variant := range []string{"none", "capture", "hold"} {
		c = nil
		if variant != "none" {
			c, err = capture.Open(capture.Options{Cgroup: cg, HoldNew: variant == "hold"})
			if err != nil {
				return r, err
			}
		}
		cpu0, t0 := benchkit.SelfCPU(), time.Now()
		runs := n // the latencies: n execs of each kind; the start-up times: a third as many
		if variant != "capture" {
			runs = max(n/3, 5)
		}
		for i := 0; i < runs; i++ {
			for _, kind := range []string{"go", "openssl"} {
				ms, err := one(kind)
				if err != nil {
					if c != nil {
						c.Close()
					}
					return r, err
				}
				r.start[kind+" "+variant] = append(r.start[kind+" "+variant], ms)
			}
		}
		if c == nil {
			continue
		}
		time.Sleep(100 * time.Millisecond) // the last attachments
		cn, _ := c.Counters()
		r.holdTimeouts += float64(cn["hold_timeouts"])
		r.unread += float64(cn["tls_connections_unread"])
		r.attachErrors += float64(cn["library_attach_errors"])
		if e := c.LastAttachError(); e != "" {
			r.lastError = e
		}
		if variant == "capture" {
			r.cpuPct = (benchkit.SelfCPU() - cpu0).Seconds() / time.Since(t0).Seconds() * 100
			r.execSecs = time.Since(t0).Seconds()
			for _, s := range c.AttachSamples() {
				ms := float64(s.Latency.Microseconds()) / 1000
				if s.Kind == "go" {
					r.goLat = append(r.goLat, ms)
					if s.Cached {
						r.goCached++
					} else {
						r.goFirst++
					}
				} else {
					r.sslLat = append(r.sslLat, ms)
				}
			}
		}
		c.Close()
	}
	return r, nil
}

// attachTotals gathers the rounds: the latencies pooled, the rest as
// per-round samples.
type attachTotals struct {
	rounds        int
	goLat, sslLat []float64
	timeouts      float64
}

func (t *attachTotals) add(rep *benchkit.Report, r attachResult) {
	t.rounds++
	t.goLat = append(t.goLat, r.goLat...)
	t.sslLat = append(t.sslLat, r.sslLat...)
	t.timeouts += r.holdTimeouts
	s := func(k string, v float64) { rep.Sample("attach", k, v) }
	s("go_attach_ms_median", benchkit.Median(r.goLat))
	s("openssl_attach_ms_median", benchkit.Median(r.sslLat))
	for _, kind := range []string{"go", "openssl"} {
		none := benchkit.Median(r.start[kind+" none"])
		s(kind+"_start_ms_untraced", none)
		s(kind+"_start_ms_captured", benchkit.Median(r.start[kind+" capture"]))
		s(kind+"_start_ms_hold", benchkit.Median(r.start[kind+" hold"]))
		s(kind+"_hold_added_ms", benchkit.Median(r.start[kind+" hold"])-none)
	}
	s("hold_timeouts", r.holdTimeouts)
	s("attach_errors", r.attachErrors)
	if r.lastError != "" {
		rep.Note("attach: last attach error: " + r.lastError)
	}
	s("agent_cpu_pct", r.cpuPct)
}

func (t *attachTotals) report(rep *benchkit.Report) {
	rep.Set("attach", "go_execs", float64(len(t.goLat)))
	rep.Set("attach", "go_attach_ms_p50_all", benchkit.Median(t.goLat))
	rep.Set("attach", "go_attach_ms_p99_all", benchkit.Percentile(t.goLat, 99))
	rep.Set("attach", "openssl_execs", float64(len(t.sslLat)))
	rep.Set("attach", "openssl_attach_ms_p50_all", benchkit.Median(t.sslLat))
	rep.Set("attach", "openssl_attach_ms_p99_all", benchkit.Percentile(t.sslLat, 99))
	rep.Set("attach", "hold_timeouts_all", t.timeouts)
	rep.Note(fmt.Sprintf("attach: each exec is of a new copy (a Go program linking crypto/tls; `openssl version` with a new "+
		"libssl.so.3 copy through LD_LIBRARY_PATH), %d of each per round captured, a third as many untraced and with --hold-new; "+
		"*_attach_ms: the kernel's exec (or openat) to the uprobes attached, captured variant, *_all pooled over the rounds; "+
		"*_start_ms: process start to exit; *_hold_added_ms: the hold's addition over untraced", len(t.goLat)/max(t.rounds, 1)))
}

// attachPerRound spreads n execs (0: attachExecs) over the rounds.
func attachPerRound(n, rounds int) int {
	if n <= 0 {
		n = attachExecs
	}
	rounds = max(rounds, 1)
	return (n + rounds - 1) / rounds
}
