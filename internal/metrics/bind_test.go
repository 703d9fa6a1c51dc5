package metrics

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestServeBindsWhereTold: a metrics endpoint listens on the address given
// and nowhere else: served on 127.0.0.2, it answers there, and the same
// port on 127.0.0.1 (which a wildcard bind would also answer) refuses.
func TestServeBindsWhereTold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Serve(ctx, "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.2" {
		t.Fatalf("served at %q (%v), want 127.0.0.2", addr, err)
	}
	r, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("127.0.0.1:%s answers: the endpoint is bound wider than 127.0.0.2", port)
	}
	// And a missing host is not taken for a default: HOST:PORT or nothing.
	if _, err := Serve(ctx, "9464"); err == nil {
		t.Error("Serve(\"9464\") accepted: want HOST:PORT")
	}
}
