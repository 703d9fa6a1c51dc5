// Package benchkit is what every `cistern bench` shares: a Report that
// becomes both the aligned table printed to the user and the bench JSON of
// the project's conventions, PNG charts, progress output that stays out of
// the way when nobody is watching, and small sample statistics.
//
// The JSON has the shape
//
//	{"bench": NAME, "kernel": RELEASE, "quick": BOOL,
//	 "config": {...}, "modes": {MODE: {metric: value, ...}},
//	 "ratios": {NAME: value}, "targets": [...], "notes": [...]}
//
// with keys in the order they were first set, so that the JSON, the table
// and a reader's eye all see modes in the order the bench ran them.
// Metric names carry their unit: ops_per_sec, p99_us, hit_ratio, …
package benchkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"

	"github.com/cistern-ebpf/cistern/kernel"
)

// Report collects the results of one bench run. Its methods are safe for
// concurrent use, so modes measured in parallel can record into one report.
type Report struct {
	mu      sync.Mutex
	bench   string
	kernel  string
	quick   bool
	config  orderedMap
	modes   []*modeResult
	ratios  orderedMap
	targets []TargetResult
	notes   []string

	// Per-round values (see Sample): mode\x00metric → samples, in the
	// order first sampled; ratio name → samples.
	samples      map[string][]float64
	sampleKeys   [][2]string
	ratioSamples map[string][]float64
	ratioKeys    []string
	headline     []string // the table's columns (see Headline)
	sections     []section
}

// section is one printed table of a report with several (see Section).
type section struct {
	title      string
	rows, cols []string
}

type modeResult struct {
	name    string
	metrics orderedMap
}

// TargetResult is one checked target: got op want, and whether it held.
type TargetResult struct {
	Name string  `json:"name"`
	Got  float64 `json:"got"`
	Op   string  `json:"op"`
	Want float64 `json:"want"`
	Pass bool    `json:"pass"`
	// Min and Max are the rounds' spread when Got is a median over rounds.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// New starts a report for the named bench on the running kernel.
func New(bench string, quick bool) *Report {
	return &Report{bench: bench, kernel: kernel.Release(), quick: quick}
}

// Bench returns the bench name.
func (r *Report) Bench() string { return r.bench }

// Kernel returns the kernel release the report was made on.
func (r *Report) Kernel() string { return r.kernel }

// Quick reports whether this was a --quick run.
func (r *Report) Quick() bool { return r.quick }

// SetConfig records one parameter of the run (keys, clients, skew, …).
// Setting a key again replaces its value but keeps its position.
func (r *Report) SetConfig(key string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.config.set(key, v)
}

// Set records a metric of a mode. Values are numbers, bools or maps of them.
// Modes and metrics keep the order in which they were first set; setting a
// metric again replaces its value.
func (r *Report) Set(mode, metric string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.modes {
		if m.name == mode {
			m.metrics.set(metric, v)
			return
		}
	}
	m := &modeResult{name: mode}
	m.metrics.set(metric, v)
	r.modes = append(r.modes, m)
}

// Get returns a recorded metric of a mode, for ratios and targets computed
// from what was measured.
func (r *Report) Get(mode, metric string) (any, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.modes {
		if m.name == mode {
			return m.metrics.get(metric)
		}
	}
	return nil, false
}

// Rows returns the modes (table rows) in the order they were first set.
func (r *Report) Rows() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.modes))
	for i, m := range r.modes {
		out[i] = m.name
	}
	return out
}

// Ratio records a named ratio between modes, e.g. "kerby_vs_memcached_ops".
func (r *Report) Ratio(name string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ratios.set(name, v)
}

// Note adds a free-text remark shown under the table and in the JSON, such as
// "client-bound: server CPU per op also reported".
func (r *Report) Note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, s)
}

// Target checks got against want with op (">=", "<=" or "==", compared
// exactly) and records the outcome. It returns whether the target was met; a
// NaN never meets a target. An unknown op is a programming error and panics.
func (r *Report) Target(name string, got float64, op string, want float64) bool {
	var pass bool
	switch op {
	case ">=":
		pass = got >= want
	case "<=":
		pass = got <= want
	case "==":
		pass = got == want
	default:
		panic(fmt.Sprintf("benchkit: target %q: unknown op %q (want >=, <= or ==)", name, op))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets = append(r.targets, TargetResult{Name: name, Got: got, Op: op, Want: want, Pass: pass})
	return pass
}

// Targets returns the recorded targets in order.
func (r *Report) Targets() []TargetResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]TargetResult(nil), r.targets...)
}

// TargetsPassed reports whether every recorded target was met (true when
// there are none), so a bench command can exit non-zero on a regression.
func (r *Report) TargetsPassed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.targets {
		if !t.Pass {
			return false
		}
	}
	return true
}

// MarshalJSON encodes the report in the bench JSON convention, keeping the
// insertion order of config keys, modes, metrics and ratios. Non-finite
// floats, which JSON cannot carry, become null.
func (r *Report) MarshalJSON() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(key string, first bool) {
		if !first {
			b.WriteByte(',')
		}
		writeJSONString(&b, key)
		b.WriteByte(':')
	}
	field("bench", true)
	writeJSONString(&b, r.bench)
	field("kernel", false)
	writeJSONString(&b, r.kernel)
	field("quick", false)
	fmt.Fprintf(&b, "%t", r.quick)
	field("config", false)
	if err := r.config.writeJSON(&b); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	field("modes", false)
	b.WriteByte('{')
	for i, m := range r.modes {
		field(m.name, i == 0)
		if err := m.metrics.writeJSON(&b); err != nil {
			return nil, fmt.Errorf("mode %s: %w", m.name, err)
		}
	}
	b.WriteByte('}')
	field("ratios", false)
	if err := r.ratios.writeJSON(&b); err != nil {
		return nil, fmt.Errorf("ratios: %w", err)
	}
	field("targets", false)
	b.WriteByte('[')
	for i, t := range r.targets {
		if i > 0 {
			b.WriteByte(',')
		}
		data, err := json.Marshal(struct {
			Name string `json:"name"`
			Got  any    `json:"got"`
			Op   string `json:"op"`
			Want any    `json:"want"`
			Pass bool   `json:"pass"`
			Min  any    `json:"min,omitempty"`
			Max  any    `json:"max,omitempty"`
		}{t.Name, jsonSafe(t.Got), t.Op, jsonSafe(t.Want), t.Pass, optFloat(t.Min), optFloat(t.Max)})
		if err != nil {
			return nil, err
		}
		b.Write(data)
	}
	b.WriteByte(']')
	if len(r.sampleKeys) > 0 || len(r.ratioKeys) > 0 {
		// Every round's figure, so that a reader can redo the statistics.
		field("rounds", false)
		var rounds orderedMap
		var modes []string
		per := map[string]*orderedMap{}
		for _, k := range r.sampleKeys {
			m := per[k[0]]
			if m == nil {
				m = &orderedMap{}
				per[k[0]] = m
				modes = append(modes, k[0])
			}
			m.set(k[1], r.samples[k[0]+"\x00"+k[1]])
		}
		for _, mode := range modes {
			rounds.set(mode, per[mode])
		}
		if len(r.ratioKeys) > 0 {
			var rs orderedMap
			for _, k := range r.ratioKeys {
				rs.set(k, r.ratioSamples[k])
			}
			rounds.set("ratios", &rs)
		}
		if err := rounds.writeJSON(&b); err != nil {
			return nil, fmt.Errorf("rounds: %w", err)
		}
	}
	field("notes", false)
	notes := r.notes
	if notes == nil {
		notes = []string{} // [] rather than null: consumers iterate it
	}
	data, err := json.Marshal(notes)
	if err != nil {
		return nil, err
	}
	b.Write(data)
	b.WriteByte('}')
	return b.Bytes(), nil
}

func optFloat(p *float64) any {
	if p == nil {
		return nil
	}
	return jsonSafe(*p)
}

func writeJSONString(b *bytes.Buffer, s string) {
	data, _ := json.Marshal(s) // a string always marshals
	b.Write(data)
}

// orderedMap is a string-keyed map that remembers insertion order.
type orderedMap struct {
	keys []string
	vals map[string]any
}

func (m *orderedMap) set(k string, v any) {
	if m.vals == nil {
		m.vals = make(map[string]any)
	}
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

func (m *orderedMap) get(k string) (any, bool) {
	v, ok := m.vals[k]
	return v, ok
}

func (m *orderedMap) writeJSON(b *bytes.Buffer) error {
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, k)
		b.WriteByte(':')
		if sub, ok := m.vals[k].(*orderedMap); ok {
			if err := sub.writeJSON(b); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			continue
		}
		data, err := json.Marshal(jsonSafe(m.vals[k]))
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		b.Write(data)
	}
	b.WriteByte('}')
	return nil
}

// jsonSafe replaces non-finite floats, at any depth of maps and slices, by
// nil: one division by zero must not cost the whole result file.
func jsonSafe(v any) any {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := rv.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
	case reflect.Map:
		if !hasFloats(rv.Type().Elem()) {
			return v
		}
		out := make(map[string]any, rv.Len())
		iter := rv.MapRange()
		for iter.Next() {
			out[mapKeyString(iter.Key())] = jsonSafe(iter.Value().Interface())
		}
		return out
	case reflect.Slice, reflect.Array:
		if !hasFloats(rv.Type().Elem()) {
			return v
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = jsonSafe(rv.Index(i).Interface())
		}
		return out
	}
	return v
}

// hasFloats reports whether values of type t may hold a float somewhere.
func hasFloats(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Interface:
		return true
	case reflect.Map, reflect.Slice, reflect.Array:
		return hasFloats(t.Elem())
	}
	return false
}

func mapKeyString(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return k.String()
	}
	return strings.TrimSpace(fmt.Sprint(k.Interface()))
}
