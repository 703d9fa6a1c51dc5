// --steps and --update: a run of some steps whose results replace those
// steps' in an earlier run's saved results, so that a step fixed after a
// long FULL run is run again alone (minutes, not the run's hour).

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// parseSteps is --steps as a set; nil (after a message) for a name that is
// no step.
func parseSteps(list string) map[string]bool {
	known := map[string]bool{"replay": true}
	for _, s := range plan {
		known[s.Name] = true
	}
	set := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !known[n] {
			var names []string
			for _, s := range plan {
				names = append(names, s.Name)
			}
			fmt.Fprintf(os.Stderr, "kernel-matrix: no step %q (%s, replay)\n", n, strings.Join(names, ", "))
			return nil
		}
		set[n] = true
	}
	return set
}

// updateResults reads the earlier run's results (path) and puts each new
// kernel result's steps into its kernel's entry there: the steps this run
// ran replace theirs, the rest (objects when loadall did not run, replays
// when they did not) stay, and the cells are decided again. A kernel the
// earlier run lacks is added as run.
func updateResults(path string, fresh []*kernelResult) ([]*kernelResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kernel-matrix: --update: %w", err)
	}
	var old []*kernelResult
	if err := json.Unmarshal(b, &old); err != nil {
		return nil, fmt.Errorf("kernel-matrix: --update %s: %w", path, err)
	}
	for _, n := range fresh {
		var o *kernelResult
		for _, c := range old {
			if c.Kernel == n.Kernel {
				o = c
			}
		}
		if o == nil {
			old = append(old, n)
			continue
		}
		if o.Release != n.Release {
			return nil, fmt.Errorf("kernel-matrix: --update: %s was %s in %s, is %s now: run it whole", n.Kernel, o.Release, path, n.Release)
		}
		for name, sr := range n.Steps {
			o.Steps[name] = sr
		}
		if only["loadall"] {
			o.Objects = n.Objects
		}
		if only["replay"] {
			o.Replay = n.Replay
		}
		if n.Doctor != nil {
			o.Doctor = n.Doctor
		}
		o.Boot, o.Elapsed = n.Boot, o.Elapsed+n.Elapsed
		o.Error, o.Systems = n.Error, map[string]cell{}
		decide(o)
	}
	return old, nil
}
