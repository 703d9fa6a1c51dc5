// Running the guests: the script each runs, one boot per kernel, and the
// collection of its outputs from the results directory.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

// guestScript runs every step, each with its own exit code and output file,
// and prints one progress line per step on the console.
func guestScript(root string, full bool, host map[string]string) string {
	var b strings.Builder
	b.WriteString("set +e\nexport CISTERN_SKIP_SERVERS=" + map[bool]string{true: "0", false: "1"}[full] + "\n")
	b.WriteString("export CISTERN_PGCLIENT_DIR=/results/bin/pgclient\n") // built by build()
	if full {
		b.WriteString("export QUERY_N=300\n") // several hundred random valid queries
	}
	b.WriteString("t0=$(date +%s)\n")
	b.WriteString("/results/bin/cistern doctor --json > /results/doctor.json 2> /results/doctor.err; echo \"cistern-matrix: doctor exit $?\"\n")
	// unavailable SYSTEM: the doctor says this kernel lacks what SYSTEM
	// needs (its name may be shared, as in "accum/capture"). Such a step
	// still runs, to show what does work, but a failure is not retried.
	b.WriteString("unavailable() { grep -E -A1 \"\\\"name\\\": \\\"([a-z]+/)?$1(/[a-z]+)?\\\"\" /results/doctor.json | grep -q '\"status\": \"unavailable\"'; }\n")
	for lane := 0; lane < 2; lane++ {
		empty := true
		for _, s := range plan {
			empty = empty && (!s.runs(full) || s.lane(full) != lane)
		}
		if empty { // "( ) &" is a syntax error (--steps of one lane)
			continue
		}
		b.WriteString("(\n")
		for _, s := range plan {
			if !s.runs(full) || s.lane(full) != lane {
				continue
			}
			args := fmt.Sprintf("-test.v -test.count=1 -test.timeout=%s", s.timeout(full))
			if !full {
				args += " -test.short"
			}
			if s.Run != "" {
				args += fmt.Sprintf(" -test.run '%s'", s.Run)
			}
			// A step that fails under emulation is run once more; the first
			// output is kept as NAME.first.out and the retry is reported.
			// A step the guest cannot start (its directory or binary is not
			// there) exits 125/126/127 (exitNoDir, exitNotExec, exitNotFound),
			// is not retried, and is a matrix ERROR, not the system's FAIL.
			dir, bin := root+"/"+s.Pkg, "/results/bin/"+testBin(s.Pkg)
			envs := ""
			if s.Servers {
				envs = "CISTERN_SKIP_SERVERS=0 "
			}
			run := fmt.Sprintf("(cd %s 2>/results/%s.start || exit %d; [ -e %s ] || { echo '%s: not found' > /results/%s.start; exit %d; }; %s%s %s > /results/%s.out 2>&1)",
				dir, s.Name, exitNoDir, bin, bin, s.Name, exitNotFound, envs, bin, args, s.Name)
			sys := s.System
			if sys == "" {
				sys = "-"
			}
			fmt.Fprintf(&b, "s=$(date +%%s); %s; rc=$?; if [ $rc -ne 0 ] && [ $rc -lt %d ] && ! unavailable %s; then mv /results/%s.out /results/%s.first.out; "+
				"echo \"cistern-matrix: %s failed (exit $rc), retrying once\"; %s; rc=$?; fi; echo $rc > /results/%s.rc; "+
				"echo \"cistern-matrix: %s exit $rc in $(( $(date +%%s) - s ))s\"\n",
				run, exitNoDir, sys, s.Name, s.Name, s.Name, run, s.Name, s.Name)
		}
		b.WriteString(") &\n")
	}
	b.WriteString("wait\n")
	for _, c := range replayChecks {
		if len(host) == 0 {
			break
		}
		fmt.Fprintf(&b, "/results/bin/cistern cache replay --trace %s --format twitter %s --json /results/replay-%s.json > /dev/null 2>&1; echo \"cistern-matrix: replay %s exit $?\"\n",
			traceFile(root), strings.Join(c.args(), " "), c.name(), c.name())
	}
	b.WriteString("echo \"cistern-matrix: all steps in $(( $(date +%s) - t0 ))s\"\n")
	return b.String()
}

func runKernel(root, bin, name string, full bool, host map[string]string) *kernelResult {
	r := &kernelResult{Kernel: name, Objects: map[string]string{}, Steps: map[string]stepResult{}, Systems: map[string]cell{}, Replay: map[string]string{}}
	s, _ := vm.Lookup(name)
	r.Who = s.Who
	k, err := openByName(name)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Kernel, r.Release = s.Display(k), k.Release
	// Each run has its own directory: two matrices at once (a developer's and
	// CI's) must not write into each other's results.
	res, err := os.MkdirTemp(resultsRoot(), "run-"+name+"-")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if err := os.MkdirAll(filepath.Join(res, "bin"), 0o755); err != nil {
		r.Error = err.Error()
		return r
	}
	cp := exec.Command("cp", "-a", bin+"/.", filepath.Join(res, "bin"))
	if out, err := cp.CombinedOutput(); err != nil {
		r.Error = fmt.Sprintf("copy binaries: %v %s", err, out)
		return r
	}
	fmt.Printf("kernel-matrix: %s (%s): booting\n", name, k.Release)
	total := 10 * time.Minute
	for _, s := range plan {
		if s.runs(full) {
			total += s.timeout(full)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	pr, pw := io.Pipe()
	go progress(pr, name)
	console, _ := os.Create(filepath.Join(res, "console.log"))
	defer console.Close()
	vr, err := k.Run(ctx, vm.Options{Script: guestScript(root, full, host), Results: res, Console: io.MultiWriter(pw, console), CPUs: 2, MemMB: 4096})
	pw.Close()
	if vr != nil {
		r.Boot, r.Elapsed = vr.Boot.Seconds(), vr.Elapsed.Seconds()
	}
	if err != nil {
		r.Error = firstLine(err.Error()) + " (console: " + filepath.Join(res, "console.log") + ")"
	}
	collect(r, root, res, full, host)
	os.RemoveAll(filepath.Join(res, "bin")) // keep the outputs, not 300 MB of binaries
	return r
}

// progress prints the guest's per-step lines as they arrive.
func progress(r io.Reader, name string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "cistern-matrix: "); i >= 0 {
			fmt.Printf("kernel-matrix: %s: %s\n", name, line[i+len("cistern-matrix: "):])
		}
	}
}

var (
	topLevel = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)
	objLine  = regexp.MustCompile(`bpfcheck_test.go:\d+: (\S+_bpfel\.o): (.*)$`)
	loadedRe = regexp.MustCompile(`^\d+ programs loaded$`)
)

func collect(r *kernelResult, root, res string, full bool, host map[string]string) {
	for _, s := range plan {
		if !s.runs(full) {
			continue
		}
		sr := stepResult{Exit: -1}
		if b, err := os.ReadFile(filepath.Join(res, s.Name+".rc")); err == nil {
			fmt.Sscan(string(b), &sr.Exit)
		}
		out, _ := os.ReadFile(filepath.Join(res, s.Name+".out"))
		for _, line := range strings.Split(string(out), "\n") {
			if m := topLevel.FindStringSubmatch(line); m != nil {
				switch m[1] {
				case "PASS":
					sr.Passed++
				case "FAIL":
					sr.Failed = append(sr.Failed, m[2])
				case "SKIP":
					sr.Skipped++
				}
			}
			if s.Name == "loadall" {
				if m := objLine.FindStringSubmatch(line); m != nil {
					obj := strings.TrimPrefix(m[1], root+"/")
					if loadedRe.MatchString(m[2]) {
						r.Objects[obj] = "ok"
					} else {
						r.Objects[obj] = m[2]
					}
				}
			}
		}
		if first, err := os.ReadFile(filepath.Join(res, s.Name+".first.out")); err == nil && sr.Exit == 0 {
			for _, line := range strings.Split(string(first), "\n") {
				if m := topLevel.FindStringSubmatch(line); m != nil && m[1] == "FAIL" {
					sr.Retried = append(sr.Retried, m[2])
				}
			}
			if len(sr.Retried) == 0 { // a crash ends the binary before any FAIL line
				sr.Retried = []string{endReason(string(first))}
			}
		}
		if why := startError(sr.Exit); why != "" {
			b, _ := os.ReadFile(filepath.Join(res, s.Name+".start"))
			sr.Error = fmt.Sprintf("the guest could not start it (%s: %s)", why, strings.TrimSpace(string(b)))
		} else if sr.Exit != 0 && len(sr.Failed) == 0 && sr.Exit != -1 {
			sr.Failed = append(sr.Failed, "exit "+fmt.Sprint(sr.Exit)+": "+endReason(string(out)))
		}
		r.Steps[s.Name] = sr
	}
	if b, err := os.ReadFile(filepath.Join(res, "doctor.json")); err == nil && json.Valid(b) {
		r.Doctor = b
	}
	for _, c := range replayChecks {
		if len(host) == 0 {
			break
		}
		b, err := os.ReadFile(filepath.Join(res, "replay-"+c.name()+".json"))
		got := "not run"
		if err == nil {
			got = hitRatio(b)
		}
		key := c.key()
		if got == host[key] {
			r.Replay[key] = "equal (" + got + ")"
		} else {
			r.Replay[key] = fmt.Sprintf("DIFFERS: guest %s, host %s", got, host[key])
		}
	}
	decide(r)
}

// Exit codes of a step the guest could not start: the shell's own 126
// (not executable) and 127 (not found), and 125 for a failed cd. Go test
// binaries exit 0, 1 or 2 (or 128+signal).
const (
	exitNoDir    = 125
	exitNotExec  = 126
	exitNotFound = 127
)

func startError(code int) string {
	switch code {
	case exitNoDir:
		return "cannot cd to its package directory"
	case exitNotExec:
		return "its test binary is not executable"
	case exitNotFound:
		return "its test binary is not there"
	}
	return ""
}

// endReason is the line that says why a test binary ended without a failed
// test: its panic (a timeout) or its last line.
func endReason(out string) string {
	running := ""
	for _, l := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(l, "=== RUN   "); ok {
			running = strings.TrimSpace(t)
		}
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			if running != "" {
				return running + ": " + l
			}
			return l
		}
	}
	return lastLine(out)
}
