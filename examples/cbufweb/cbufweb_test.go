package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

var (
	buildOnce sync.Once
	builtBins Binaries
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// bins builds the programs once per test binary.
func bins(t *testing.T) Binaries {
	t.Helper()
	testenv.NeedTool(t, "cc", "gcc")
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cbufweb-build-")
		if buildErr == nil {
			builtBins, buildErr = Build(buildDir)
		}
	})
	if builtBins.CBufWeb == "" {
		t.Fatalf("build: %v", buildErr)
	}
	return builtBins
}

// needFail skips (naming what is missing) or, with CISTERN_REQUIRE_ALL=1,
// fails.
func needFail(t *testing.T, what string) {
	t.Helper()
	testenv.Missing(t, what, "sudo make deps installs it")
}

type stack struct {
	mgr  *cbuf.Manager
	srv  *Server
	sock string
	stop context.CancelFunc
	done chan error
}

// startStack runs an in-process CBUF manager and cbufweb with the cache and
// metrics.
func startStack(t *testing.T, send string) *stack {
	t.Helper()
	b := bins(t)
	dir := t.TempDir()
	st := &stack{sock: filepath.Join(dir, "cbuf.sock"), done: make(chan error, 1)}
	var err error
	st.mgr, err = cbuf.NewManager(cbuf.ManagerOptions{Socket: st.sock, Memory: 256 << 20, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.stop = cancel
	go func() { st.done <- st.mgr.Run(ctx) }()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	st.srv, err = StartCBufWeb(rctx, b, Options{Dir: filepath.Join(dir, "web"), CBufSocket: st.sock, Cache: true, Metrics: true, Send: send, Stderr: testWriter{t}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.srv.Stop()
		cancel()
		<-st.done
	})
	return st
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, name+" ") {
			var v float64
			fmt.Sscan(strings.TrimPrefix(l, name+" "), &v)
			return v
		}
	}
	t.Fatalf("metric %s not in:\n%s", name, body)
	return 0
}

// noLeaks stops cbufweb and checks the manager collected every buffer:
// no component, orphan or used page is left.
func (st *stack) noLeaks(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	st.srv.Stop()
	t.Logf("cbufweb stopped in %v", time.Since(t0))
	defer func() { t.Logf("manager empty %v after the stop began", time.Since(t0)) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := st.mgr.Stats()
		live, total := st.mgr.Audit()
		if len(s.Components) == 0 && s.Orphans == 0 && s.UsedPages == 0 && total == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after stopping cbufweb the manager still has %d components, %d orphan buffers, %d used pages, %d buffers (%d live): %+v",
				len(s.Components), s.Orphans, s.UsedPages, total, live, s.Components)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKeepAliveBodiesAndMetrics(t *testing.T) {
	st := startStack(t, "")
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	before := metric(t, st.srv.MetricsURL, "cbufweb_connections_accepted_total")
	sizes := []int{1, 7, 1024, 4096, 16 << 10, 65536 + 3, 256 << 10, (256 << 10) + 1, 1 << 20, 4 << 20}
	n := 0
	t0 := time.Now()
	defer func() { t.Logf("%d checked requests in %v", n, time.Since(t0)) }()
	for round := 0; round < 3; round++ {
		for i, size := range sizes {
			seed := uint64(round*100 + i)
			for _, path := range []string{"gen", "cached"} {
				url := fmt.Sprintf("%s/%s?size=%d&seed=%d", st.srv.URL, path, size, seed)
				if err := Check(c, url, size, seed); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	// all on one keep-alive connection
	if got := metric(t, st.srv.MetricsURL, "cbufweb_connections_accepted_total") - before; got != 1 {
		t.Errorf("%d requests used %v connections, want 1 (keep-alive)", n, got)
	}
	if got := metric(t, st.srv.MetricsURL, `cbufweb_responses_total{code="200"}`); got < float64(n) {
		t.Errorf("200 responses counted %v, want >= %d", got, n)
	}
	// pipelined: two requests in one write, two responses in order
	conn, err := net.Dial("tcp", strings.TrimPrefix(st.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /gen?size=100&seed=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /gen?size=200&seed=2 HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	for i, size := range []int{100, 200} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined response %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(body) != size || Checksum(body) != Checksum(Expected(size, uint64(i+1))) {
			t.Fatalf("pipelined response %d: status %d, %d bytes", i, resp.StatusCode, len(body))
		}
	}
	conn.Close()
	st.noLeaks(t)
}

// rawStatus writes req on a new connection and returns the status code and
// whether the server then closed the connection.
func rawStatus(t *testing.T, addr, req string) (int, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%.60q: %v", req, err)
	}
	io.Copy(io.Discard, resp.Body)
	// EOF, or a reset when the server closed with unread input; a timeout
	// means the connection stays open
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = br.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return resp.StatusCode, false
	}
	return resp.StatusCode, err != nil
}

func TestBadRequests(t *testing.T) {
	st := startStack(t, "")
	addr := strings.TrimPrefix(st.srv.URL, "http://")
	big := strings.Repeat("a", 20000)
	cases := []struct {
		name, req string
		status    int
		closes    bool
	}{
		{"garbage", "GARBAGE\r\n\r\n", 400, true},
		{"binary", "\x00\x01\x02 / HTTP/1.1\r\n\r\n", 400, true},
		{"no host", "GET /gen?size=1 HTTP/1.1\r\n\r\n", 400, true},
		{"bad version", "GET /gen?size=1 HTTP/2.7\r\nHost: x\r\n\r\n", 400, true},
		{"bad header", "GET /gen?size=1 HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, true},
		{"bad length", "GET /gen?size=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 12x\r\n\r\n", 400, true},
		{"huge header", "GET /gen?size=1 HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 413, true},
		{"huge body", "GET /gen?size=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", 413, true},
		{"chunked", "GET /gen?size=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501, true},
		{"size 0", "GET /gen?size=0 HTTP/1.1\r\nHost: x\r\n\r\n", 400, false},
		{"size too large", "GET /gen?size=99999999 HTTP/1.1\r\nHost: x\r\n\r\n", 400, false},
		{"unknown path", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, false},
		{"post", "POST /gen?size=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405, false},
		{"http/1.0 closes", "GET /gen?size=10 HTTP/1.0\r\n\r\n", 200, true},
		{"connection close", "GET /gen?size=10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, true},
	}
	for _, c := range cases {
		t0 := time.Now()
		got, closed := rawStatus(t, addr, c.req)
		t.Logf("%s: %d closed=%v in %v", c.name, got, closed, time.Since(t0))
		if got != c.status {
			t.Errorf("%s: status %d, want %d", c.name, got, c.status)
		}
		if c.closes != closed {
			t.Errorf("%s: connection closed %v, want %v", c.name, closed, c.closes)
		}
	}
	if v := metric(t, st.srv.MetricsURL, `cbufweb_responses_total{code="400"}`); v < 8 {
		t.Errorf("400s counted %v, want >= 8", v)
	}
	if v := metric(t, st.srv.MetricsURL, `cbufweb_responses_total{code="413"}`); v != 2 {
		t.Errorf("413s counted %v, want 2", v)
	}
	// the server still serves
	if err := Check(http.DefaultClient, st.srv.URL+"/gen?size=5000&seed=9", 5000, 9); err != nil {
		t.Fatal(err)
	}
	st.noLeaks(t)
}

// A content component that dies mid-request gets its requests a 502; the
// supervisor restarts it, the front end reconnects and serves correct
// bodies again (the new component's pool, not the dead one's), and the
// manager collects every buffer.
func TestContentDiesMidRequest(t *testing.T) {
	st := startStack(t, "")
	c := &http.Client{Timeout: 20 * time.Second}
	if err := Check(c, st.srv.URL+"/gen?size=300000&seed=1", 300000, 1); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		old := st.srv.Pid("content")
		// 1: killed from outside while it delays a request
		type res struct {
			code int
			err  error
		}
		ch := make(chan res, 1)
		go func() {
			resp, err := c.Get(st.srv.URL + "/gen?size=300000&delay_ms=3000")
			if err != nil {
				ch <- res{0, err}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ch <- res{resp.StatusCode, nil}
		}()
		time.Sleep(500 * time.Millisecond)
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatalf("kill content %d: %v", old, err)
		}
		r := <-ch
		if r.err != nil || r.code != 502 {
			t.Fatalf("round %d: request whose content component was killed: %d %v, want 502", round, r.code, r.err)
		}
		waitHealthy(t, st.srv, old)
		// 2: dies by itself while filling a body (half written)
		old = st.srv.Pid("content")
		resp, err := c.Get(st.srv.URL + "/gen?size=600000&crash=1")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 502 {
			t.Fatalf("round %d: crash request: status %d, want 502", round, resp.StatusCode)
		}
		waitHealthy(t, st.srv, old)
		for i, size := range []int{1000, 300000, 1 << 20} {
			seed := uint64(round*10 + i)
			if err := Check(c, fmt.Sprintf("%s/gen?size=%d&seed=%d", st.srv.URL, size, seed), size, seed); err != nil {
				t.Fatalf("round %d after the restart: %v", round, err)
			}
		}
	}
	if v := metric(t, st.srv.MetricsURL, `cbufweb_responses_total{code="502"}`); v != 6 {
		t.Errorf("502s counted %v, want 6", v)
	}
	if v := metric(t, st.srv.MetricsURL, `cbufweb_upstream_deaths_total{component="content"}`); v != 6 {
		t.Errorf("content deaths counted %v, want 6", v)
	}
	// the dead components' buffers are gone while the server runs: only the
	// live components remain, nothing orphaned
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := st.mgr.Stats()
		alive := 0
		for _, c := range s.Components {
			if c.Alive {
				alive++
			}
		}
		if s.Orphans == 0 && alive == len(s.Components) && alive == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manager after the restarts: %d orphans, components %+v", s.Orphans, s.Components)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.noLeaks(t)
}

func waitHealthy(t *testing.T, s *Server, oldPid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Pid("content") == oldPid || s.Pid("content") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the supervisor did not restart the content component")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx, "/health"); err != nil {
		t.Fatal(err)
	}
}

// The alternative send paths give the same bytes (the bench measures their
// speed).
func TestSendModes(t *testing.T) {
	for _, mode := range []string{"zerocopy", "splice"} {
		t.Run(mode, func(t *testing.T) {
			st := startStack(t, mode)
			c := &http.Client{Timeout: 20 * time.Second}
			for i, size := range []int{100, 65536, 1 << 20} {
				if err := Check(c, fmt.Sprintf("%s/gen?size=%d&seed=%d", st.srv.URL, size, i), size, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			c.CloseIdleConnections()
			st.noLeaks(t)
		})
	}
}

// nginx and Apache with the FastCGI application produce the same bodies.
func TestBaselinesAgree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: nginx and Apache are started as root (workers as www-data)") // not a missing tool: root
	}
	for _, tool := range []string{"nginx", "apache2"} {
		if _, err := exec.LookPath(tool); err != nil {
			needFail(t, tool)
		}
	}
	b := bins(t)
	if b.FCGIApp == "" {
		needFail(t, "libfcgi (Debian package libfcgi-dev)")
	}
	for _, start := range []func(context.Context, Binaries, Options) (*Server, error){StartNginx, StartApache} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// a directory of its own, 0755: the workers (www-data) reach the sockets
		s, err := start(ctx, b, Options{Group: true, Stderr: testWriter{t}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(s.Dir) })
		c := &http.Client{Timeout: 20 * time.Second}
		for i, size := range []int{1, 1024, 16 << 10, 65536, 256 << 10, 1 << 20} {
			if err := CheckBody(c, fmt.Sprintf("%s/gen?size=%d&seed=%d", s.URL, size, i), size, uint64(i), s.Name == "nginx"); err != nil {
				t.Errorf("%s: %v", s.Name, err)
			}
		}
		if s.CPU() <= 0 {
			t.Errorf("%s: no CPU time counted in its group", s.Name)
		}
		c.CloseIdleConnections()
		s.Stop()
	}
}
