package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

// A step runs inside the guest; its output and exit code land in /results.
type step struct {
	Name    string // file stem in /results
	System  string // column of the table; "" for load-all and doctor
	Pkg     string // package whose test binary runs (cwd = its directory)
	Run     string // -test.run pattern, "" for all
	Full    bool   // only with FULL=1
	Lane    int    // steps of one lane run in order; the two lanes run side by side
	Timeout time.Duration
}

// systems in table order, with the packages whose tests decide them.
var systemOrder = []string{"pool", "kv", "accum", "capture", "evict", "pagecache", "cbuf", "query"}

// plan lists the guest's steps. The fast matrix (CI) runs every test that
// needs no server, with -test.short; FULL=1 adds the server tests
// (memcached, PostgreSQL, MariaDB) and the long ones.
var plan = []step{
	{Name: "loadall", Pkg: "internal/bpfcheck", Lane: 0, Timeout: 10 * time.Minute},
	{Name: "pool", System: "pool", Pkg: "pool", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "kv", System: "kv", Pkg: "kv", Lane: 1, Timeout: 15 * time.Minute},
	{Name: "kvgen", System: "kv", Pkg: "internal/kvgen", Lane: 0, Timeout: 5 * time.Minute},
	{Name: "accum", System: "accum", Pkg: "accum", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "capture", System: "capture", Pkg: "capture", Lane: 1, Timeout: 15 * time.Minute},
	{Name: "evict", System: "evict", Pkg: "evict", Lane: 0, Timeout: 10 * time.Minute},
	{Name: "cache", System: "evict", Pkg: "cache", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "pagecache", System: "pagecache", Pkg: "pagecache", Lane: 1, Timeout: 10 * time.Minute},
	{Name: "cbuf", System: "cbuf", Pkg: "cbuf", Lane: 0, Timeout: 10 * time.Minute},
	{Name: "cbuf-kcomp", System: "cbuf", Pkg: "cbuf/kcomp", Lane: 0, Timeout: 5 * time.Minute},
	{Name: "query", System: "query", Pkg: "query", Run: "RandomValid|RandomInvalid|Exit|Limit", Lane: 1, Timeout: 20 * time.Minute},
}

// replayChecks compare in-kernel replay hit ratios in the guest with the
// host's: the same policy object must give the same answer on every kernel.
var replayChecks = []replayCheck{{"lru", "10000", ""}, {"s3fifo", "10000", ""}, {"lhd", "1000", ""}, {"get-scan", "1000000", "bytes"}}

// A replay check; Unit "bytes" sizes the cache in bytes (GET-SCAN in bytes
// was once refused as too complex on 6.12 only).
type replayCheck struct{ Policy, Size, Unit string }

func (c replayCheck) name() string {
	if c.Unit != "" {
		return c.Policy + "-" + c.Unit
	}
	return c.Policy
}

func (c replayCheck) key() string {
	if c.Unit != "" {
		return c.Policy + "/" + c.Size + "/" + c.Unit
	}
	return c.Policy + "/" + c.Size
}

func (c replayCheck) args() []string {
	a := []string{"--policy", c.Policy, "--size", c.Size}
	if c.Unit != "" {
		a = append(a, "--unit", c.Unit)
	}
	return a
}

type kernelResult struct {
	Kernel   string            `json:"kernel"`
	Release  string            `json:"release"`
	Who      string            `json:"who"`
	Boot     float64           `json:"boot_s"`
	Elapsed  float64           `json:"elapsed_s"`
	Error    string            `json:"error,omitempty"`
	Objects  map[string]string `json:"objects"` // object -> "ok" or the refusal
	Steps    map[string]stepResult
	Systems  map[string]cell   `json:"systems"`
	Doctor   json.RawMessage   `json:"doctor,omitempty"`
	Replay   map[string]string `json:"replay,omitempty"`
	Features map[string]string `json:"features,omitempty"`
}

type stepResult struct {
	Exit    int      `json:"exit"`
	Passed  int      `json:"passed"`
	Failed  []string `json:"failed,omitempty"`
	Skipped int      `json:"skipped"`
	Seconds float64  `json:"seconds"`
}

type cell struct {
	Status string `json:"status"` // works, degraded, unsupported, FAIL
	Why    string `json:"why,omitempty"`
}

func matrixMain(args []string) int {
	fs := flag.NewFlagSet("kernel-matrix", flag.ExitOnError)
	kernels := fs.String("kernels", "6.1,6.12,5.10", "comma-separated kernels: 5.10, 6.1, 6.12")
	full := fs.Bool("full", os.Getenv("FULL") == "1", "also run the server and long tests (FULL=1)")
	docs := fs.String("docs", "", "write the table as markdown to FILE (docs/kernels.md)")
	readme := fs.String("readme", "", "replace the kernel table between the kernel-matrix markers in FILE (README.md)")
	jsonOut := fs.String("json", "", "write all results as JSON to FILE")
	fromJSON := fs.String("from-json", "", "render --docs/--readme from a saved --json FILE instead of running")
	took := fs.Duration("took", 0, "with --from-json: how long that run took")
	fs.Parse(args)
	if *fromJSON != "" {
		return render(*fromJSON, *full, *took, *docs, *readme)
	}

	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	var names []string
	for _, n := range strings.Split(*kernels, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if err := fetch(root, names); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin, err := os.MkdirTemp(resultsRoot(), "bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	fmt.Printf("kernel-matrix: building the static test binaries (%d packages)\n", len(plan))
	if err := build(root, bin, *full); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	host, err := hostReplay(root, bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	// Kernels boot side by side: each guest's TCG is one host thread.
	results := make([]*kernelResult, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runKernel(root, bin, n, *full, host)
		}()
	}
	wg.Wait()
	failed := false
	for i, n := range names {
		r := results[i]
		for _, sys := range systemOrder {
			if r.Systems[sys].Status == "FAIL" {
				failed = true
			}
		}
		if r.Error != "" && n != "5.10" {
			failed = true
		}
	}
	table := renderTable(results)
	fmt.Println()
	fmt.Print(table)
	fmt.Printf("\nkernel-matrix: %s in %s\n", map[bool]string{true: "full run", false: "fast run"}[*full], time.Since(start).Round(time.Second))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		os.WriteFile(*jsonOut, b, 0o644)
	}
	if *docs != "" {
		if err := os.WriteFile(*docs, []byte(renderDocs(results, *full, time.Since(start))), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("kernel-matrix: wrote", *docs)
	}
	if *readme != "" {
		if err := spliceReadme(*readme, summaryTable(results)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("kernel-matrix: updated the table in", *readme)
	}
	if failed {
		return 1
	}
	return 0
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("kernel-matrix: run from inside the repository: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func fetch(root string, names []string) error {
	var suites []string
	for _, n := range names {
		found := false
		for _, s := range vm.Suites {
			if s.Name == n {
				found = true
				if _, err := vm.Open(s.Suite); err != nil {
					suites = append(suites, s.Suite)
				}
			}
		}
		if !found {
			return fmt.Errorf("kernel-matrix: unknown kernel %q (5.10, 6.1, 6.12)", n)
		}
	}
	if len(suites) == 0 {
		return nil
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts/kernel-matrix/fetch-kernels.sh")}, suites...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// build compiles cistern and each step's test binary. CGO is off so the
// binaries do not depend on the host's libc version (they run on the host's
// file system anyway, but a static binary is what a user copies to a node).
func build(root, bin string, full bool) error {
	env := append(os.Environ(), "CGO_ENABLED=0")
	run := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kernel-matrix: go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("build", "-o", filepath.Join(bin, "cistern"), "./cmd/cistern"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range plan {
		if (s.Full && !full) || seen[s.Pkg] {
			continue
		}
		seen[s.Pkg] = true
		if err := run("test", "-c", "-o", filepath.Join(bin, testBin(s.Pkg)), "./"+s.Pkg); err != nil {
			return err
		}
	}
	return nil
}

func testBin(pkg string) string { return strings.ReplaceAll(pkg, "/", "-") + ".test" }

func traceFile(root string) string {
	return filepath.Join(root, "..", "shared", "data", "traces", "twitter_cluster52_1m.csv.zst")
}

// hostReplay runs the replay checks on the host, for the guests to match.
func hostReplay(root, bin string) (map[string]string, error) {
	out := map[string]string{}
	if _, err := os.Stat(traceFile(root)); err != nil {
		fmt.Println("kernel-matrix: no shared/data/traces beside the clone: replay checks skipped")
		return out, nil
	}
	for _, c := range replayChecks {
		f := filepath.Join(bin, "replay-"+c.name()+".json")
		args := append([]string{"cache", "replay", "--trace", traceFile(root), "--format", "twitter"}, c.args()...)
		if b, err := exec.Command(filepath.Join(bin, "cistern"), append(args, "--json", f)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kernel-matrix: host replay %s: %v: %s", c.name(), err, b)
		}
		b, _ := os.ReadFile(f)
		os.Remove(f)
		out[c.key()] = hitRatio(b)
	}
	return out, nil
}

func hitRatio(b []byte) string {
	var v map[string]any
	if json.Unmarshal(b, &v) != nil {
		return "unparsable"
	}
	if h, ok := v["hit_ratio"].(float64); ok {
		return fmt.Sprintf("%.6f", h)
	}
	return "no hit_ratio"
}

// guestScript runs every step, each with its own exit code and output file,
// and prints one progress line per step on the console.
func guestScript(root string, full bool, host map[string]string) string {
	var b strings.Builder
	b.WriteString("set +e\nexport CISTERN_SKIP_SERVERS=" + map[bool]string{true: "0", false: "1"}[full] + "\n")
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
		b.WriteString("(\n")
		for _, s := range plan {
			if (s.Full && !full) || s.Lane != lane {
				continue
			}
			args := fmt.Sprintf("-test.v -test.count=1 -test.timeout=%s", s.Timeout)
			if !full {
				args += " -test.short"
			}
			if s.Run != "" {
				args += fmt.Sprintf(" -test.run '%s'", s.Run)
			}
			// A step that fails under emulation is run once more; the first
			// output is kept as NAME.first.out and the retry is reported.
			run := fmt.Sprintf("(cd %s/%s && /results/bin/%s %s > /results/%s.out 2>&1)", root, s.Pkg, testBin(s.Pkg), args, s.Name)
			sys := s.System
			if sys == "" {
				sys = "-"
			}
			fmt.Fprintf(&b, "s=$(date +%%s); %s; rc=$?; if [ $rc -ne 0 ] && ! unavailable %s; then mv /results/%s.out /results/%s.first.out; "+
				"echo \"cistern-matrix: %s failed (exit $rc), retrying once\"; %s; rc=$?; fi; echo $rc > /results/%s.rc; "+
				"echo \"cistern-matrix: %s exit $rc in $(( $(date +%%s) - s ))s\"\n",
				run, sys, s.Name, s.Name, s.Name, run, s.Name, s.Name)
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
	for _, s := range vm.Suites {
		if s.Name == name {
			r.Who = s.Who
		}
	}
	k, err := openByName(name)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Release = k.Release
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
		if !s.Full || full {
			total += s.Timeout
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
		if s.Full && !full {
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
		if sr.Exit != 0 && len(sr.Failed) == 0 && sr.Exit != -1 {
			sr.Failed = append(sr.Failed, "exit "+fmt.Sprint(sr.Exit)+": "+lastLine(string(out)))
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

// doctorSystems reads the doctor's per-system verdicts.
func doctorSystems(raw json.RawMessage) map[string]cell {
	var d struct {
		Systems []struct {
			Name, Status, Detail string
		} `json:"systems"`
	}
	out := map[string]cell{}
	if json.Unmarshal(raw, &d) == nil {
		for _, s := range d.Systems {
			for _, n := range strings.Split(s.Name, "/") { // "accum/capture" is both columns
				out[n] = cell{Status: s.Status, Why: s.Detail}
			}
		}
	}
	return out
}

// decide fills the table's cells: a system whose tests or objects failed is
// FAIL; otherwise the doctor's verdict (works, degraded: how, unsupported:
// why) stands.
func decide(r *kernelResult) {
	doc := doctorSystems(r.Doctor)
	objSystem := func(obj string) string {
		dir := strings.Split(obj, "/")[0]
		switch dir {
		case "pool", "kv", "accum", "capture", "evict", "pagecache", "query", "cbuf":
			return dir
		case "cache":
			return "evict"
		}
		return ""
	}
	for _, sys := range systemOrder {
		c := cell{Status: "works"}
		if d, ok := doc[sys]; ok {
			switch {
			case strings.HasPrefix(d.Status, "degraded"):
				c = cell{Status: "degraded", Why: d.Why}
			case strings.HasPrefix(d.Status, "unavailable"), strings.HasPrefix(d.Status, "unsupported"):
				c = cell{Status: "unsupported", Why: d.Why}
			}
		}
		var why []string
		for obj, st := range r.Objects {
			if st != "ok" && objSystem(obj) == sys {
				why = append(why, obj+" refused")
			}
		}
		for _, s := range plan {
			sr, ok := r.Steps[s.Name]
			if !ok || s.System != sys {
				continue
			}
			if sr.Exit != 0 {
				f := sr.Failed
				if len(f) > 3 {
					f = append(f[:3:3], fmt.Sprintf("%d more", len(sr.Failed)-3))
				}
				why = append(why, s.Name+" tests: "+strings.Join(f, ", "))
			}
		}
		if sys == "evict" {
			for k, v := range r.Replay {
				if strings.HasPrefix(v, "DIFFERS") {
					why = append(why, "replay "+k+" "+v)
				}
			}
		}
		if len(why) > 0 && c.Status != "unsupported" {
			sort.Strings(why)
			c = cell{Status: "FAIL", Why: strings.Join(why, "; ")}
		}
		r.Systems[sys] = c
	}
}

func renderTable(rs []*kernelResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-8s", "kernel", "objects")
	for _, s := range systemOrder {
		fmt.Fprintf(&b, " %-11s", s)
	}
	b.WriteString("\n")
	for _, r := range rs {
		okN, n := 0, len(r.Objects)
		for _, st := range r.Objects {
			if st == "ok" {
				okN++
			}
		}
		fmt.Fprintf(&b, "%-6s %-8s", r.Kernel, fmt.Sprintf("%d/%d", okN, n))
		for _, s := range systemOrder {
			fmt.Fprintf(&b, " %-11s", r.Systems[s].Status)
		}
		if r.Error != "" {
			fmt.Fprintf(&b, "  (%s)", r.Error)
		}
		b.WriteString("\n")
	}
	for _, r := range rs {
		for _, s := range systemOrder {
			if c := r.Systems[s]; c.Why != "" {
				fmt.Fprintf(&b, "  %s %s: %s: %s\n", r.Kernel, s, c.Status, c.Why)
			}
		}
	}
	return b.String()
}

// render writes the docs and the README's table from a saved run.
func render(path string, full bool, took time.Duration, docs, readme string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var results []*kernelResult
	if err := json.Unmarshal(b, &results); err != nil {
		fmt.Fprintln(os.Stderr, "kernel-matrix:", path, err)
		return 1
	}
	fmt.Print(renderTable(results))
	if docs != "" {
		if err := os.WriteFile(docs, []byte(renderDocs(results, full, took)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if readme != "" {
		if err := spliceReadme(readme, summaryTable(results)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// summaryTable is the kernel × system table the README quotes.
func summaryTable(rs []*kernelResult) string {
	var b strings.Builder
	b.WriteString("| kernel | who runs it |")
	for _, s := range systemOrder {
		b.WriteString(" " + s + " |")
	}
	b.WriteString("\n|---|---|")
	for range systemOrder {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s |", r.Kernel, r.Who)
		for _, s := range systemOrder {
			c := r.Systems[s]
			txt := c.Status
			if c.Status == "degraded" || c.Status == "unsupported" {
				txt += " (" + c.Why + ")"
			}
			b.WriteString(" " + strings.ReplaceAll(txt, "|", "/") + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

const (
	markBegin = "<!-- kernel-matrix: begin (generated by make kernel-matrix FULL=1) -->"
	markEnd   = "<!-- kernel-matrix: end -->"
)

func spliceReadme(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, markBegin), strings.Index(s, markEnd)
	if i < 0 || j < i {
		return fmt.Errorf("kernel-matrix: %s has no %q … %q block", path, markBegin, markEnd)
	}
	s = s[:i+len(markBegin)] + "\n" + table + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

func renderDocs(rs []*kernelResult, full bool, took time.Duration) string {
	var b strings.Builder
	b.WriteString("# Kernels\n\n")
	b.WriteString("Generated by `make kernel-matrix" + map[bool]string{true: " FULL=1", false: ""}[full] + "` (cmd/kernel-matrix): each of Debian's cloud kernels boots under qemu on the host's file system and runs the load-all test, `cistern doctor --json` and every system's tests")
	if !full {
		b.WriteString(" that need no server")
	}
	fmt.Fprintf(&b, ". Run: %s, %s.\n\n", time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	b.WriteString(summaryTable(rs))
	b.WriteString("\n## Details\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "\n### %s (%s)\n\n", r.Kernel, r.Release)
		if r.Error != "" {
			fmt.Fprintf(&b, "- run error: %s\n", r.Error)
		}
		okN := 0
		for _, st := range r.Objects {
			if st == "ok" {
				okN++
			}
		}
		fmt.Fprintf(&b, "- %s: %d of %d BPF objects load\n", r.Who, okN, len(r.Objects))
		fmt.Fprintf(&b, "- boot to user space %.1f s, whole run %.0f s (qemu TCG)\n", r.Boot, r.Elapsed)
		for _, sys := range systemOrder {
			if c := r.Systems[sys]; c.Why != "" {
				fmt.Fprintf(&b, "- %s: %s: %s\n", sys, c.Status, c.Why)
			}
		}
		var names []string
		for n := range r.Steps {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := r.Steps[n]
			fmt.Fprintf(&b, "- %s: exit %d, %d passed, %d skipped, %d failed", n, s.Exit, s.Passed, s.Skipped, len(s.Failed))
			if len(s.Failed) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(s.Failed, ", "))
			}
			b.WriteString("\n")
		}
		var objs []string
		for o, st := range r.Objects {
			if st != "ok" {
				objs = append(objs, o+": "+st)
			}
		}
		sort.Strings(objs)
		for _, o := range objs {
			fmt.Fprintf(&b, "- refused: %s\n", o)
		}
		var reps []string
		for k, v := range r.Replay {
			reps = append(reps, k+" "+v)
		}
		sort.Strings(reps)
		if len(reps) > 0 {
			fmt.Fprintf(&b, "- replay hit ratio vs the host: %s\n", strings.Join(reps, "; "))
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
