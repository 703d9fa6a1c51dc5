package servers

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// JaegerBin is where scripts/deps.sh builds Jaeger v2 (Jaeger's own
// distribution of the OpenTelemetry Collector: OTLP receivers, in-memory
// trace store, query API). `go install` cannot build it (its go.mod has
// replace directives), so deps.sh builds it in a module of its own.
const JaegerBin = "/usr/local/lib/cistern/jaeger"

// Jaeger is a running Jaeger v2 all-in-one: OTLP on 127.0.0.1:4317 (gRPC)
// and :4318 (HTTP), query API on :16686.
type Jaeger struct {
	p   *proc
	log string
}

// StartJaeger runs Jaeger with its default (in-memory) configuration and
// waits until its query API answers.
func StartJaeger() (*Jaeger, error) {
	bin := JaegerBin
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("jaeger"); err != nil {
			return nil, fmt.Errorf("jaeger %w: run sudo make deps", ErrNotInstalled)
		}
	}
	lf, err := logFile("jaeger")
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	c := command("", bin)
	c.Stdout, c.Stderr = lf, lf
	p, err := start(c)
	if err != nil {
		return nil, fmt.Errorf("start jaeger: %w", err)
	}
	j := &Jaeger{p: p, log: lf.Name()}
	for _, addr := range []string{"127.0.0.1:16686", "127.0.0.1:4317", "127.0.0.1:4318"} {
		if err := waitTCP("", addr, 60*time.Second, p.exited); err != nil {
			out, _ := os.ReadFile(lf.Name())
			j.Stop()
			return nil, fmt.Errorf("jaeger: %w\n%s", err, out)
		}
	}
	return j, nil
}

// Span is a span as Jaeger's query API returns it.
type Span struct {
	Operation string
	Tags      map[string]any
	Kind      string
	Start     time.Time
	Duration  time.Duration
}

// Spans returns the spans of service from the last hour.
func (j *Jaeger) Spans(service string) ([]Span, error) {
	r, err := http.Get("http://127.0.0.1:16686/api/traces?limit=10000&lookback=1h&service=" + service)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var resp struct {
		Data []struct {
			Spans []struct {
				OperationName string `json:"operationName"`
				StartTime     int64  `json:"startTime"` // µs
				Duration      int64  `json:"duration"`  // µs
				Tags          []struct {
					Key   string `json:"key"`
					Value any    `json:"value"`
				} `json:"tags"`
			} `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("jaeger answer %.200q: %w", b, err)
	}
	var out []Span
	for _, t := range resp.Data {
		for _, s := range t.Spans {
			sp := Span{Operation: s.OperationName, Tags: map[string]any{}, Start: time.UnixMicro(s.StartTime), Duration: time.Duration(s.Duration) * time.Microsecond}
			for _, tg := range s.Tags {
				sp.Tags[tg.Key] = tg.Value
				if tg.Key == "span.kind" {
					sp.Kind, _ = tg.Value.(string)
				}
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

// Stop terminates Jaeger.
func (j *Jaeger) Stop() {
	j.p.stop()
	os.Remove(j.log)
}
