package query

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
	"github.com/cistern-ebpf/cistern/query/qgen"
)

func seed(t *testing.T) int64 {
	if s := os.Getenv("QUERY_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s := time.Now().UnixNano()
	t.Logf("seed %d (rerun with QUERY_SEED=%d)", s, s)
	return s
}

// TestRandomValidQueriesAllRun is the guarantee: every valid query from
// the generator compiles, loads through the real verifier and runs 50 ms.
func TestRandomValidQueriesAllRun(t *testing.T) {
	testenv.RequireRoot(t)
	n := 1000
	if testing.Short() {
		n = 100
	}
	if v, err := strconv.Atoi(os.Getenv("QUERY_N")); err == nil && v > 0 {
		n = v // the kernel matrix's full run asks for several hundred
	}
	r := rand.New(rand.NewSource(seed(t)))
	queries := make([]string, n)
	for i := range queries {
		queries[i] = qgen.Valid(r)
	}
	var (
		wg      sync.WaitGroup
		next    atomic.Int64
		failed  atomic.Int64
		plans   sync.Map
		mu      sync.Mutex
		kernAgg int
	)
	start := time.Now()
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				q := queries[i]
				format := []string{"table", "json", "csv"}[i%3]
				mode := ModeOptimizer
				if i%10 == 0 {
					mode = ModeMVSFOnly
				}
				var out bytes.Buffer
				res, err := Run(context.Background(), q, Options{Duration: 50 * time.Millisecond, Out: &out, Format: format, Mode: mode})
				if err != nil {
					if failed.Add(1) <= 10 {
						t.Errorf("query %d %q (%s): %v", i, q, mode, err)
					}
					continue
				}
				if format == "json" {
					if err := checkJSON(out.Bytes(), res.Rows); err != nil {
						t.Errorf("query %d %q: %v", i, q, err)
					}
				}
				v, _ := plans.LoadOrStore(res.Plan, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				if res.Plan == "join+agg" || res.Plan == "join+filter+agg" || res.Plan == "agg" || res.Plan == "filter+agg" {
					mu.Lock()
					kernAgg++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d valid queries failed", f, n)
	}
	plans.Range(func(k, v any) bool {
		t.Logf("plan %-22s %d queries", k, v.(*atomic.Int64).Load())
		return true
	})
	t.Logf("%d queries compiled, loaded and ran in %v", n, time.Since(start).Round(time.Millisecond))
	if kernAgg == 0 {
		t.Errorf("no query was aggregated in the kernel: the generator misses that plan")
	}
}

func checkJSON(b []byte, rows int) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("line %d: %v", n+1, err)
		}
		n++
	}
	if n != rows {
		return fmt.Errorf("%d JSON lines, Result.Rows %d", n, rows)
	}
	return nil
}

// TestRandomInvalidQueriesFail: every invalid query fails before anything
// is loaded, with a positioned error (*query.Error: the CLI exits with 2).
func TestRandomInvalidQueriesFail(t *testing.T) {
	r := rand.New(rand.NewSource(seed(t)))
	for i := 0; i < 2000; i++ {
		q, why := qgen.Invalid(r)
		err := Check(q)
		var qe *Error
		if !errors.As(err, &qe) {
			t.Fatalf("%s: %q: want a positioned *query.Error, got %v", why, q, err)
		}
		if qe.Line < 1 || qe.Col < 1 || qe.Col > len(q)+1 {
			t.Fatalf("%s: %q: position %d:%d out of range", why, q, qe.Line, qe.Col)
		}
	}
}
