package capturebench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// The node-postgres modes (issue #37): one Node.js process (OpenSSL inside
// the node executable) running node-postgres over TLS, simple and extended
// protocol in turn, for the mode's duration. node_pg is untraced (the
// rate's baseline); node_pg_naive and node_pg_accumulated trace it with the
// naive channel and the capture (its client side: --pid with the
// uprobes' own filter). The client is the tests' (node/client.js), its
// packages installed by scripts/node-clients.sh.

//go:embed node/client.js
var nodeClientJS []byte

// nodeConns: the client's connections, side by side. One: with 8 (quick
// run, load above 20) the rate did not rise, and the connections'
// alternating segments cut the batches, so ring bytes per payload byte
// went from 1.14 to 1.32.
const nodeConns = 1

// NodeModules is where scripts/node-clients.sh installs pg and mysql2.
const NodeModules = "/var/cache/cistern/node/node_modules"

// nodeAvailable says why the node modes cannot run ("" if they can).
func nodeAvailable() string {
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not installed (Node.js 20 from nodejs.org or NodeSource)"
	}
	if _, err := os.Stat(filepath.Join(NodeModules, "pg")); err != nil {
		return "node-postgres is not installed (scripts/node-clients.sh, run by sudo make deps)"
	}
	return ""
}

// startNodePG starts the client; it connects once told to (resume), so a
// tracer attaches first, as startStopped's SIGSTOP gives pgbench.
func startNodePG(ctx context.Context, pg *servers.Postgres, opt Options, tok string) (*pgbenchRun, error) {
	dir, err := os.MkdirTemp("", "cistern-node-")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "client.js")
	if err := os.WriteFile(script, nodeClientJS, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", script, "pg", strconv.Itoa(pg.Opt.Port), tok, "1", "--wait", "--tls-only", "--conns", strconv.Itoa(nodeConns),
		"--seconds", strconv.FormatFloat(opt.Duration.Seconds(), 'f', -1, 64))
	cmd.Env = append(os.Environ(), "NODE_PATH="+NodeModules)
	r := &pgbenchRun{cmd: cmd, done: make(chan error, 1)}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var errOut bytes.Buffer // its own: r.out is written by the stdout reader below
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			r.out.WriteString(sc.Text() + "\n")
		}
		err := cmd.Wait()
		r.out.Write(errOut.Bytes())
		r.done <- err
		os.RemoveAll(dir)
	}()
	r.resumeFn = func() error { _, err := io.WriteString(stdin, "go\n"); return err }
	select {
	case <-ready:
		return r, nil
	case err := <-r.done:
		return nil, fmt.Errorf("node client: %v: %s", err, r.out.String())
	case <-time.After(time.Minute):
		r.kill()
		return nil, fmt.Errorf("node client not ready in a minute: %s", r.out.String())
	}
}

// nodeResult reads the client's "done QUERIES SECONDS".
func nodeResult(r *pgbenchRun) func(error) (sent, rate float64, err error) {
	return func(err error) (float64, float64, error) {
		if err != nil {
			return 0, 0, fmt.Errorf("node client: %v: %s", err, r.out.String())
		}
		for _, l := range strings.Split(r.out.String(), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "done" {
				n, _ := strconv.ParseFloat(f[1], 64)
				s, _ := strconv.ParseFloat(f[2], 64)
				if s > 0 {
					return n, n / s, nil
				}
			}
		}
		return 0, 0, fmt.Errorf("node client (%v) output not understood: %q", r.cmd.Args, r.out.String())
	}
}

func runNodePG(ctx context.Context, pg *servers.Postgres, mode string, ring uint32, opt Options) (captureResult, error) {
	tok := strconv.FormatInt(time.Now().UnixNano(), 36)
	nr, err := startNodePG(ctx, pg, opt, tok)
	if err != nil {
		return captureResult{}, err
	}
	mark := "'n-" + tok + "-tls-"
	count := func(q string) bool { return strings.Contains(q, mark) }
	switch mode {
	case "node_pg":
		if err := nr.resume(); err != nil {
			nr.kill()
			return captureResult{}, err
		}
		sent, rate, err := nodeResult(nr)(<-nr.done)
		return captureResult{sent: sent, tps: rate, ok: true}, err
	case "node_pg_naive":
		return runNaiveOn(nr, ring, count, nodeResult(nr))
	}
	c, err := capture.Open(capture.Options{PID: nr.cmd.Process.Pid, Transport: capture.TransportTLS, Accum: accum.Config{RingSize: ring}})
	if err != nil {
		nr.kill()
		return captureResult{}, err
	}
	defer c.Close()
	return measureCapture(nr, c, func(q capture.Query) bool { return count(q.Query) && q.Side == capture.SideClient }, nodeResult(nr))
}
