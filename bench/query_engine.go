package bench

import (
	"context"
	"io"
	"time"
)

// The query compiler (package query, issue #8 parts 1-3) is built on its own
// branch. Until it is merged, runQuery is nil and the bench skips the
// optimizer and mvsf_only modes with a note. Once it lands, this file
// becomes:
//
//	runQuery = func(ctx context.Context, sql string, o engineOptions) (*engineResult, error) {
//		r, err := query.Run(ctx, sql, query.Options{Duration: o.Duration, Mode: o.Mode,
//			Out: o.Out, Format: o.Format, Explain: o.Explain})
//		if r == nil {
//			return nil, err
//		}
//		return &engineResult{r.Events, r.LostEvents, r.Rows, r.Plan}, err
//	}

// engineOptions mirror query.Options.
type engineOptions struct {
	Duration time.Duration
	Mode     string // "optimizer" or "mvsf_only"
	Out      io.Writer
	Format   string // table|json|csv
	Explain  io.Writer
}

// engineResult mirrors query.Result.
type engineResult struct {
	Events     uint64
	LostEvents uint64
	Rows       int
	Plan       string
}

var runQuery func(ctx context.Context, sql string, opt engineOptions) (*engineResult, error)
