package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// buildCLI builds the real binary once per test binary.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cistern")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func run(bin string, args ...string) (stdout, stderr string, code int) {
	stdout, stderr, code, _ = runPid(bin, args...)
	return
}

// runPid also returns the process id (the doctor names its namespaces by it).
func runPid(bin string, args ...string) (stdout, stderr string, code, pid int) {
	var o, e bytes.Buffer
	c := exec.Command(bin, args...)
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if c.Process != nil {
		pid = c.Process.Pid
	}
	return o.String(), e.String(), code, pid
}

func TestExitCodes(t *testing.T) {
	bin := buildCLI(t)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"version"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"kv", "--help"}, 0},
		{[]string{"bogus"}, 2},
		{[]string{"doctor", "--bogus"}, 2},
		{[]string{"version", "extra"}, 2},
		{[]string{"kv", "bogus"}, 2},
	}
	for _, c := range cases {
		_, stderr, code := run(bin, c.args...)
		if code != c.code {
			t.Errorf("cistern %v: exit %d, want %d (stderr %q)", c.args, code, c.code, stderr)
		}
		if c.code != 0 && (len(stderr) == 0 || bytes.Count([]byte(stderr), []byte("\n")) != 1) {
			t.Errorf("cistern %v: want a one-line error, got %q", c.args, stderr)
		}
	}
}

func TestDoctorJSON(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	out, stderr, code, pid := runPid(bin, "doctor", "--json")
	if code != 0 {
		t.Fatalf("doctor exit %d: %s", code, stderr)
	}
	var rep struct {
		Kernel string `json:"kernel"`
		Checks []struct {
			Name, Status, Detail, Fix string
		} `json:"checks"`
		Systems []struct{ Name, Status, Detail string } `json:"systems"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if len(rep.Systems) != 7 {
		t.Errorf("%d systems, want pool, kv, accum/capture, evict/cache, pagecache, cbuf, query: %+v", len(rep.Systems), rep.Systems)
	}
	for _, s := range rep.Systems {
		if s.Status != "ok" && s.Status != "degraded" {
			t.Errorf("system %s is %s on this kernel: %s", s.Name, s.Status, s.Detail)
		}
	}
	if rep.Kernel == "" || len(rep.Checks) < 14 {
		t.Fatalf("kernel %q, %d checks", rep.Kernel, len(rep.Checks))
	}
	seen := map[string]string{}
	for _, c := range rep.Checks {
		seen[c.Name] = c.Status
		switch c.Status {
		case "ok", "missing", "unsupported":
		default:
			t.Errorf("check %s has status %q", c.Name, c.Status)
		}
	}
	for _, n := range []string{"kprobe", "fentry", "xdp_generic", "tcx", "uprobe", "struct_ops", "clang-19", "memcached"} {
		if _, ok := seen[n]; !ok {
			t.Errorf("no %s check", n)
		}
	}
	// Its own namespaces only: other tests may run a doctor meanwhile.
	for _, side := range []string{"srv", "cli"} {
		name := fmt.Sprintf("/var/run/netns/cistern-dr%d-%s", pid%100000, side)
		if _, err := os.Stat(name); err == nil {
			t.Errorf("doctor left namespace %s", name)
		}
	}
}

// TestDoctorRemountsTracefs unmounts tracefs in a private mount namespace
// (so parallel tests keep theirs) and expects the doctor to mount it again
// and say so.
func TestDoctorRemountsTracefs(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildCLI(t)
	script := "umount /sys/kernel/tracing && ! mountpoint -q /sys/kernel/tracing && " + bin + " doctor --json"
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("doctor in a private mount namespace: %v\n%s", err, out)
	}
	var rep struct {
		Checks []struct{ Name, Status, Detail string } `json:"checks"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range rep.Checks {
		switch c.Name {
		case "tracefs":
			found = true
			if c.Status != "ok" || !bytes.HasPrefix([]byte(c.Detail), []byte("was not mounted: mounted tracefs")) {
				t.Errorf("tracefs check: %+v", c)
			}
		case "tracepoint":
			if c.Status != "ok" {
				t.Errorf("tracepoint after remount: %+v", c)
			}
		}
	}
	if !found {
		t.Fatal("no tracefs check")
	}
}
