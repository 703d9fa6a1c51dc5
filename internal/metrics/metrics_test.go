package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrape fetches /metrics from addr and returns its samples by metric line
// name, e.g. "cistern_kv_hits_total" -> "42", and the whole body.
func scrape(t *testing.T, addr string) (map[string]string, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	samples := make(map[string]string)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if name, val, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			samples[name] = val
		}
	}
	return samples, string(body)
}

func serve(t *testing.T, cs ...prometheus.Collector) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addr, err := Serve(ctx, "127.0.0.1:0", cs...)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestServeCounters(t *testing.T) {
	var hits atomic.Uint64
	hits.Store(42)
	reads := 0
	cs := NewCounterSet("cistern", "kv", func() (map[string]uint64, error) {
		reads++
		return map[string]uint64{
			"hits":         hits.Load(),
			"rx-drops":     7,
			"misses_total": 3,
			"9lives":       9,
		}, nil
	})
	addr := serve(t, cs)

	samples, body := scrape(t, addr)
	for name, want := range map[string]string{
		"cistern_kv_hits_total":          "42",
		"cistern_kv_rx_drops_total":      "7",
		"cistern_kv_misses_total":        "3",
		"cistern_kv__9lives_total":       "9",
		"cistern_kv_scrape_errors_total": "0",
	} {
		if got := samples[name]; got != want {
			t.Errorf("%s = %q, want %s\n%s", name, got, want, body)
		}
	}
	if !strings.Contains(body, "# TYPE cistern_kv_hits_total counter") {
		t.Errorf("hits is not exposed as a counter:\n%s", body)
	}

	// Every scrape reads afresh.
	hits.Store(100)
	if samples, body := scrape(t, addr); samples["cistern_kv_hits_total"] != "100" {
		t.Errorf("after the counter moved, second scrape shows:\n%s", body)
	}
	if reads != 2 {
		t.Errorf("read called %d times for 2 scrapes", reads)
	}
}

func TestCounterSetReadError(t *testing.T) {
	fail := true
	cs := NewCounterSet("cistern", "capture", func() (map[string]uint64, error) {
		if fail {
			return nil, errors.New("map lookup failed")
		}
		return map[string]uint64{"lost_events": 5}, nil
	})
	addr := serve(t, cs)
	for i := 1; i <= 2; i++ {
		samples, body := scrape(t, addr)
		if samples["cistern_capture_scrape_errors_total"] != fmt.Sprint(i) {
			t.Errorf("scrape %d: scrape_errors_total = %q\n%s", i, samples["cistern_capture_scrape_errors_total"], body)
		}
		if _, ok := samples["cistern_capture_lost_events_total"]; ok {
			t.Errorf("scrape %d: counters exposed although read failed", i)
		}
	}
	fail = false
	samples, _ := scrape(t, addr)
	if samples["cistern_capture_lost_events_total"] != "5" || samples["cistern_capture_scrape_errors_total"] != "2" {
		t.Errorf("after recovery: %v", samples)
	}
}

func TestCounterSetMergesClashingNames(t *testing.T) {
	addr := serve(t, NewCounterSet("c", "", func() (map[string]uint64, error) {
		return map[string]uint64{"rx.drops": 1, "rx-drops": 2, "": 99}, nil
	}))
	samples, body := scrape(t, addr)
	if samples["c_rx_drops_total"] != "3" {
		t.Errorf("clashing names: c_rx_drops_total = %q\n%s", samples["c_rx_drops_total"], body)
	}
	if len(samples) != 2 {
		t.Errorf("want rx_drops and scrape_errors only, got %v", samples)
	}
}

func TestServeOwnRegistry(t *testing.T) {
	read := func() (map[string]uint64, error) { return map[string]uint64{"x": 1}, nil }
	// The same names twice would fail on one shared registry.
	a := serve(t, NewCounterSet("dup", "s", read))
	b := serve(t, NewCounterSet("dup", "s", read))
	for _, addr := range []string{a, b} {
		if samples, _ := scrape(t, addr); samples["dup_s_x_total"] != "1" {
			t.Errorf("%s: dup_s_x_total = %q", addr, samples["dup_s_x_total"])
		}
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "dup_") {
			t.Errorf("%s leaked into the global registry", mf.GetName())
		}
	}
}

func TestServeAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Serve(t.Context(), ln.Addr().String())
	if err == nil {
		t.Fatal("Serve on a busy address succeeded")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "already in use") ||
		!strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("unclear error: %v", err)
	}
	if ae := new(AddrError); errors.As(err, &ae) {
		t.Errorf("a busy address is not a bad one: %v", err)
	}
}

func TestServeBadAddress(t *testing.T) {
	for _, addr := range []string{"9464", "", "localhost"} {
		_, err := Serve(t.Context(), addr)
		var ae *AddrError
		if !errors.As(err, &ae) || ae.Addr != addr || !strings.Contains(err.Error(), "HOST:PORT") {
			t.Errorf("Serve(%q) = %v, want an *AddrError asking for HOST:PORT", addr, err)
		}
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scrape(t, addr) // up
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Once shut down, the port is free again for a new listener.
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still listening on %s after the context ended: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Serve(ctx, "127.0.0.1:0"); !errors.Is(err, context.Canceled) {
		t.Errorf("Serve with a cancelled context = %v", err)
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"hits":       "hits",
		"rx-drops":   "rx_drops",
		"tls.bytes":  "tls_bytes",
		"a:b":        "a_b",
		"9lives":     "_9lives",
		"Ünïcode ok": "_n_code_ok",
		"":           "",
	} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}
