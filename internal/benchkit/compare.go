package benchkit

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// RunTargets is what Compare reads of one run's JSON: its bench, whether it
// was quick, and its targets.
type RunTargets struct {
	Path    string
	Bench   string         `json:"bench"`
	Quick   bool           `json:"quick"`
	Targets []TargetResult `json:"targets"`
}

// ReadTargets reads the targets of a bench's JSON file.
func ReadTargets(path string) (RunTargets, error) {
	r := RunTargets{Path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: not a bench JSON: %w", path, err)
	}
	if r.Bench == "" {
		return r, fmt.Errorf("%s: not a bench JSON (no \"bench\")", path)
	}
	return r, nil
}

// Compare writes one row per target of the runs (same bench): each run's
// median [min–max] and verdict, and whether the verdicts agree. It returns
// the targets whose verdicts differ (or that only some runs have).
func Compare(w io.Writer, runs []RunTargets) ([]string, error) {
	if len(runs) < 2 {
		return nil, fmt.Errorf("compare needs two runs or more")
	}
	for _, r := range runs[1:] {
		if r.Bench != runs[0].Bench {
			return nil, fmt.Errorf("%s is bench %s, %s bench %s: compare runs of one bench", runs[0].Path, runs[0].Bench, r.Path, r.Bench)
		}
	}
	var names []string
	for _, r := range runs {
		for _, t := range r.Targets {
			if !slices.Contains(names, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"target", "want"}
	for i, r := range runs {
		head = append(head, fmt.Sprintf("run %d%s", i+1, map[bool]string{true: " (quick)"}[r.Quick]))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "same verdict"), "\t"))
	var differ []string
	for _, n := range names {
		row := []string{n, ""}
		var verdicts []bool
		for _, r := range runs {
			i := slices.IndexFunc(r.Targets, func(t TargetResult) bool { return t.Name == n })
			if i < 0 {
				row = append(row, "-")
				continue
			}
			t := r.Targets[i]
			row[1] = t.Op + " " + FormatFloat(t.Want)
			got := FormatFloat(t.Got)
			if t.Min != nil && t.Max != nil {
				got = FormatSpread(t.Got, *t.Min, *t.Max)
			}
			row = append(row, got+" "+map[bool]string{true: "PASS", false: "FAIL"}[t.Pass])
			verdicts = append(verdicts, t.Pass)
		}
		same := len(verdicts) == len(runs) && !slices.Contains(verdicts, !verdicts[0])
		if !same {
			differ = append(differ, n)
		}
		fmt.Fprintln(tw, strings.Join(append(row, map[bool]string{true: "yes", false: "NO"}[same]), "\t"))
	}
	return differ, tw.Flush()
}
