package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/kernel"
)

func TestDoctorCoreOK(t *testing.T) {
	testenv.RequireRoot(t)
	rep := Run(context.Background(), Options{SkipTools: true})
	if len(rep.Checks) < 14 {
		t.Errorf("only %d checks", len(rep.Checks))
	}
	for _, c := range rep.Checks {
		t.Logf("%-18s %-11s %s", c.Name, c.Status, c.Detail)
		if c.Core && c.Status != OK {
			t.Errorf("core check %s: %s (%s)", c.Name, c.Status, c.Detail)
		}
	}
	for _, s := range rep.Systems {
		t.Logf("%-14s %-11s %s", s.Name, s.Status, s.Detail)
	}
	for _, name := range []string{"kprobe", "fentry"} {
		c := rep.Find(name)
		if c == nil || c.Status == "" || c.Detail == "" {
			t.Errorf("%s check missing or empty: %+v", name, c)
		}
	}
	// Nothing left behind (its own namespaces: other tests may run a doctor).
	for _, side := range []string{"srv", "cli"} {
		name := fmt.Sprintf("/var/run/netns/cistern-dr%d-%s", os.Getpid()%100000, side)
		if _, err := os.Stat(name); err == nil {
			t.Errorf("namespace %s left behind", name)
		}
	}
	if avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control"); strings.Contains(string(avail), "cistern_probe") {
		t.Errorf("the struct_ops probe stayed registered: %s", avail)
	}
}

// capabilities are the checks the doctor must report, once each.
var capabilities = []string{
	"kernel", "btf", "tracefs", "bpffs", "lockdown", "memlock", "memory_cgroup", "reclaim",
	"tracepoint", "raw_tp", "tp_btf", "uprobe", "xdp_generic", "xdp_native", "tcx",
	"ringbuf", "mmap_array", "bpf_loop", "xdp_load_bytes", "bpf_timer", "syscall_prog",
	"struct_ops", "atomics", "for_each_map_elem", "cachestat", "filemap_get_pages", "xdp_live_frames", "sockmap_verdict", "sockmap_self_redirect", "kprobe", "fentry",
}

// TestReportJSON: the JSON report has one entry per capability (no
// duplicates, none missing), every failure says why, and one entry per
// system with a known status.
func TestReportJSON(t *testing.T) {
	testenv.RequireRoot(t)
	data, err := json.Marshal(Run(context.Background(), Options{SkipTools: true}))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Checks []struct {
			Name, Status, Detail, Fix string
			Core                      bool
		} `json:"checks"`
		Systems []struct{ Name, Status, Detail string } `json:"systems"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, c := range rep.Checks {
		seen[c.Name]++
		if c.Status != string(OK) && c.Detail == "" {
			t.Errorf("%s is %s without a reason", c.Name, c.Status)
		}
		if c.Status == string(Missing) && c.Fix == "" {
			t.Errorf("%s is missing without a fix", c.Name)
		}
	}
	for _, n := range capabilities {
		if seen[n] != 1 {
			t.Errorf("check %s appears %d times, want once", n, seen[n])
		}
	}
	if len(seen) != len(capabilities) {
		t.Errorf("%d distinct checks, want %d: %v", len(seen), len(capabilities), seen)
	}
	systems := map[string]bool{}
	for _, s := range rep.Systems {
		systems[s.Name] = true
		switch kernel.SystemStatus(s.Status) {
		case kernel.SystemOK, kernel.SystemDegraded, kernel.SystemUnavailable:
		default:
			t.Errorf("system %s: status %q", s.Name, s.Status)
		}
		if s.Detail == "" {
			t.Errorf("system %s: no detail", s.Name)
		}
	}
	for _, n := range []string{"pool", "kv", "accum/capture", "evict/cache", "pagecache", "cbuf", "query"} {
		if !systems[n] {
			t.Errorf("no system %s in %v", n, rep.Systems)
		}
	}
}

// TestOneRefusalHidesNothing plays a kernel that refuses the bpf_loop and
// SYSCALL probes (as 5.10 does): those two checks fail with a reason, every
// other capability is still tried and reported as before, and the doctor
// does not panic.
func TestOneRefusalHidesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	before := Run(context.Background(), Options{SkipTools: true})
	refuseProbe = func(prog string) error {
		if prog == "probe_loop" || prog == "probe_syscall" {
			return fmt.Errorf("load program: %w (played by the test)", ebpf.ErrNotSupported)
		}
		return nil
	}
	defer func() { refuseProbe = nil }()
	after := Run(context.Background(), Options{SkipTools: true})
	for _, name := range []string{"bpf_loop", "syscall_prog"} {
		c := after.Find(name)
		if c == nil || c.Status != Unsupported || !strings.Contains(c.Detail, "played by the test") {
			t.Errorf("%s: %+v, want unsupported with the refusal", name, c)
		}
	}
	if c := after.Find("bpf_loop"); c != nil && !strings.Contains(c.Detail, "kv") {
		t.Errorf("bpf_loop does not say what it costs: %s", c.Detail)
	}
	for _, b := range before.Checks {
		if b.Name == "bpf_loop" || b.Name == "syscall_prog" {
			continue
		}
		if a := after.Find(b.Name); a == nil || a.Status != b.Status {
			t.Errorf("%s: %v before, %v with bpf_loop refused", b.Name, b.Status, a)
		}
	}
}

// In agent mode (CISTERN_AGENT=1, as the DaemonSet sets it) the doctor
// lists no development tool; otherwise every tool is checked.
func TestDoctorAgentModeListsNoTools(t *testing.T) {
	testenv.RequireRoot(t)
	names := func(r *Report) map[string]bool {
		m := map[string]bool{}
		for _, c := range r.Checks {
			m[c.Name] = true
		}
		return m
	}
	t.Setenv("CISTERN_AGENT", "")
	dev := Run(context.Background(), Options{})
	t.Setenv("CISTERN_AGENT", "1")
	agent := Run(context.Background(), Options{})
	if !agent.Agent || dev.Agent {
		t.Fatalf("agent flag: %v with CISTERN_AGENT=1, %v without", agent.Agent, dev.Agent)
	}
	for _, tl := range tools {
		if !names(dev)[tl.name] {
			t.Errorf("%s not checked outside agent mode", tl.name)
		}
		if names(agent)[tl.name] {
			t.Errorf("%s checked in agent mode: a node agent needs no development tools", tl.name)
		}
	}
	var b strings.Builder
	agent.WriteTable(&b)
	if strings.Contains(b.String(), "apt-get install") || !strings.Contains(b.String(), "agent mode") {
		t.Errorf("agent-mode table:\n%s", b.String())
	}
}
