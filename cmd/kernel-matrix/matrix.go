// The kernel matrix: boots Debian's cloud kernels under qemu and runs the
// load-all test, the doctor and every system's tests in each (docs/kernels.md).
// plan.go lists the steps, guest.go runs them, decide.go gives the verdict,
// render.go writes the tables.

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

func matrixMain(args []string) int {
	fs := flag.NewFlagSet("kernel-matrix", flag.ExitOnError)
	kernels := fs.String("kernels", "6.1,6.12,sid,5.10", "comma-separated kernels: 6.1, 6.12, sid (the newest, shown by its version) or its version (7.2), 5.10")
	full := fs.Bool("full", os.Getenv("FULL") == "1", "also run the server and long tests (FULL=1)")
	docs := fs.String("docs", "", "write the table as markdown to FILE (docs/kernels.md)")
	readme := fs.String("readme", "", "replace the kernel table between the kernel-matrix markers in FILE (README.md)")
	jsonOut := fs.String("json", "", "write all results as JSON to FILE")
	fromJSON := fs.String("from-json", "", "render --docs/--readme from a saved --json FILE instead of running")
	took := fs.Duration("took", 0, "with --from-json: how long that run took")
	merge := fs.Bool("merge", os.Getenv("MERGE") == "1", "with --docs/--readme: replace only these kernels' rows, keep the others (MERGE=1)")
	steps := fs.String("steps", "", "run only these comma-separated steps (loadall, pool, kv, ..., replay for the replay checks), e.g. the ones a run failed")
	update := fs.String("update", "", "with --steps: the saved --json FILE of an earlier run whose results for these kernels the steps replace")
	fs.Parse(args)
	if *steps != "" {
		if only = parseSteps(*steps); only == nil {
			return 2
		}
	}
	if *update != "" && *steps == "" {
		fmt.Fprintln(os.Stderr, "kernel-matrix: --update needs --steps (a whole run replaces nothing)")
		return 2
	}
	if *fromJSON != "" {
		return render(*fromJSON, *full, *merge, *took, *docs, *readme)
	}

	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The guest sees the host's tree except where it mounts its own file
	// systems; a clone there cannot be tested, so say so before building.
	if err := vm.Visible(root); err != nil {
		fmt.Fprintln(os.Stderr, "kernel-matrix:", err)
		return 2
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
	var host map[string]string
	if only == nil || only["replay"] {
		if host, err = hostReplay(root, bin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
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
	if *update != "" {
		if results, err = updateResults(*update, results); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	failed := false
	for i, n := range names {
		r := results[i]
		for _, sys := range systemOrder {
			switch r.Systems[sys].Status {
			case "FAIL":
				failed = true
			case "ERROR":
				failed = failed || n != "5.10" // as a run error below
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
		if err := writeDocs(*docs, results, *full, *merge, time.Since(start)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("kernel-matrix: wrote", *docs)
	}
	if *readme != "" {
		if err := spliceReadme(*readme, summaryTable(results), *merge); err != nil {
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
