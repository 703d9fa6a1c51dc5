package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestKVBenchRuns drives a miniature bench end to end and checks what it
// reports (not how fast: performance lives in `cistern bench kv`).
func TestKVBenchRuns(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	plot := filepath.Join(dir, "kv.png")
	rep, err := KV(context.Background(), KVOptions{
		Keys: 2000, Phase: 500 * time.Millisecond, Skews: []float64{0.99},
		Modes: []string{"vanilla", "fixed128", "kerby"}, PlotPath: plot,
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Bench  string                    `json:"bench"`
		Modes  map[string]map[string]any `json:"modes"`
		Ratios map[string]float64        `json:"ratios"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"vanilla", "fixed128", "kerby"} {
		row := doc.Modes[m]
		for _, k := range []string{"ops_per_sec", "p50_us", "p99_us", "kernel_hit_ratio", "memory_efficiency", "wrong_values", "lost_replies"} {
			if _, ok := row[k]; !ok {
				t.Errorf("modes.%s has no %s", m, k)
			}
		}
		if row["wrong_values"].(float64) != 0 || row["ops_per_sec"].(float64) <= 0 {
			t.Errorf("%s: %v", m, row)
		}
	}
	if doc.Modes["kerby"]["kernel_hit_ratio"].(float64) < 0.9 || doc.Modes["kerby"]["memory_efficiency"].(float64) < 0.9 {
		t.Errorf("kerby: %v", doc.Modes["kerby"])
	}
	if _, ok := doc.Ratios["kerby_vs_vanilla"]; !ok {
		t.Error("no kerby_vs_vanilla ratio")
	}
	if st, err := os.Stat(plot); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
}
