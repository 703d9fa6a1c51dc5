// The verdict: from a guest's collected outputs, each system's cell.

package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

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
	Error   string   `json:"error,omitempty"`   // the guest could not start the step: a matrix ERROR
	Retried []string `json:"retried,omitempty"` // failed in the step's first run (NAME.first.out), before its retry
	Seconds float64  `json:"seconds"`
}

type cell struct {
	Status string `json:"status"` // works, degraded, unsupported, FAIL, or ERROR (the matrix could not run its tests)
	Why    string `json:"why,omitempty"`
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
// FAIL; one whose tests the guest could not start or never ran (a
// missing directory or binary, a guest that stopped first) is ERROR, the
// matrix's failure and not the system's; otherwise the doctor's verdict
// (works, degraded: how, unsupported: why) stands.
func decide(r *kernelResult) {
	doc := doctorSystems(r.Doctor)
	objSystem := func(obj string) string {
		dir := strings.Split(obj, "/")[0]
		switch dir {
		case "pool", "kv", "accum", "capture", "evict", "pagecache", "query", "cbuf":
			return dir
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
		var why, errs, retried []string
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
			switch {
			case sr.Error != "":
				errs = append(errs, s.Name+": "+sr.Error)
			case sr.Exit == -1:
				errs = append(errs, s.Name+": did not run (no exit code: the guest stopped before it)")
			case sr.Exit != 0:
				f := sr.Failed
				if len(f) > 3 {
					f = append(f[:3:3], fmt.Sprintf("%d more", len(sr.Failed)-3))
				}
				why = append(why, s.Name+" tests: "+strings.Join(f, ", "))
			case len(sr.Retried) > 0:
				retried = append(retried, s.Name+" passed on its retry (first run failed: "+strings.Join(sr.Retried, ", ")+")")
			}
		}
		if sys == "evict" {
			for k, v := range r.Replay {
				switch {
				case strings.HasPrefix(v, "DIFFERS: guest not run"): // the guest stopped first
					errs = append(errs, "replay "+k+": did not run")
				case strings.HasPrefix(v, "DIFFERS"):
					why = append(why, "replay "+k+" "+v)
				}
			}
		}
		sort.Strings(why)
		sort.Strings(errs)
		switch {
		case len(why) > 0 && c.Status != "unsupported":
			c = cell{Status: "FAIL", Why: strings.Join(append(why, errs...), "; ")}
		case len(errs) > 0:
			c = cell{Status: "ERROR", Why: "matrix error: " + strings.Join(errs, "; ")}
		case len(retried) > 0: // it works, but the flake is shown, not hidden
			sort.Strings(retried)
			c.Why = strings.TrimPrefix(c.Why+"; "+strings.Join(retried, "; "), "; ")
		}
		r.Systems[sys] = c
	}
	// A step of no system (load-all): its objects are judged above, but a
	// run that did not finish (a timeout, a crash) leaves objects unjudged,
	// so it fails the kernel's run.
	for _, s := range plan {
		sr, ok := r.Steps[s.Name]
		if !ok || s.System != "" || r.Error != "" {
			continue
		}
		switch {
		case sr.Error != "":
			r.Error = "matrix error: " + s.Name + ": " + sr.Error
		case sr.Exit == -1:
			r.Error = "matrix error: " + s.Name + ": did not run (no exit code: the guest stopped before it)"
		case sr.Exit != 0:
			r.Error = s.Name + " tests: " + strings.Join(sr.Failed, ", ")
		}
	}
}
