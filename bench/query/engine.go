package querybench

import (
	"context"
	"io"
	"time"

	"github.com/cistern-ebpf/cistern/query"
)

// engineOptions and engineResult are the part of package query's API the
// bench uses (query.Options, query.Result).
type engineOptions struct {
	Duration time.Duration
	Mode     string // "optimizer" or "mvsf_only"
	Out      io.Writer
	Format   string // table|json|csv
	OnLoaded func() // the plan is attached: start the workload
}

type engineResult struct {
	Events     uint64
	LostEvents uint64
	Rows       int
	Plan       string
}

// runQuery runs one query through the compiler.
func runQuery(ctx context.Context, sql string, o engineOptions) (*engineResult, error) {
	r, err := query.Run(ctx, sql, query.Options{Duration: o.Duration, Mode: o.Mode,
		Out: o.Out, Format: o.Format, OnLoaded: o.OnLoaded})
	if r == nil {
		return nil, err
	}
	return &engineResult{r.Events, r.LostEvents, r.Rows, r.Plan}, err
}
