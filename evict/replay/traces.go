package replay

import (
	"os"
	"path/filepath"

	"github.com/cistern-ebpf/cistern/evict"
)

// TraceDir is where the bundled traces are: $CISTERN_TRACES, else
// shared/data/traces beside the repository holding the working directory,
// else /work/shared/data/traces.
func TraceDir() string {
	if d := os.Getenv("CISTERN_TRACES"); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	for d := wd; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "data", "traces")
		}
	}
	return "/work/shared/data/traces"
}

// Distinct counts the distinct keys of reqs.
func Distinct(reqs []evict.Request) int {
	seen := make(map[uint64]struct{}, len(reqs)/4)
	for _, r := range reqs {
		seen[r.Key] = struct{}{}
	}
	return len(seen)
}
