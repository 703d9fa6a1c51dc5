// Package metrics exposes a daemon's counters to Prometheus, for the
// `--metrics ADDR` flag every Cistern daemon offers: an HTTP server with
// /metrics on a registry of its own, and a collector that turns a map of
// named counters, read afresh from per-CPU BPF maps at every scrape, into
// Prometheus counters.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AddrError is a --metrics address that is not HOST:PORT.
type AddrError struct {
	Addr string
	Err  error
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("--metrics %q: %v: give HOST:PORT, e.g. 127.0.0.1:9464", e.Addr, e.Err)
}
func (e *AddrError) Unwrap() error { return e.Err }

// shutdownGrace bounds how long an in-flight scrape may delay shutdown.
const shutdownGrace = 2 * time.Second

// Serve starts an HTTP server on addr (HOST:PORT; port 0 picks a free one)
// that serves the given collectors at /metrics, and returns the address it
// listens on. The collectors live in a registry of their own, not
// Prometheus' global one, so that several servers (or tests) in one process
// never collide. The server stops when ctx is done.
//
// A malformed addr is an *AddrError (the CLI exits with status 2); an
// address already in use says so and wraps syscall.EADDRINUSE.
func Serve(ctx context.Context, addr string, collectors ...prometheus.Collector) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", &AddrError{Addr: addr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	reg := prometheus.NewRegistry()
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return "", fmt.Errorf("metrics: register collector: %w", err)
		}
	}

	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return "", fmt.Errorf("metrics: %s is already in use: stop what listens there or pick another --metrics address (port 0 picks a free one): %w", addr, err)
	}
	if err != nil {
		return "", fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// One failing collector should not hide every other counter.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "cistern: metrics are at /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) // returns http.ErrServerClosed on shutdown; nothing else is expected
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close() // a stuck scrape must not keep the port
		}
	}()
	return ln.Addr().String(), nil
}
