package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// Node.js carries OpenSSL inside its executable: the capture finds SSL_read
// and SSL_write in node's own symbol table and attaches there, at the start
// and at exec. Node's TLS writes into a memory BIO and libuv moves the
// ciphertext outside any libssl call, so the socket is tied to its SSL
// object by the thread's last call (cap_last_tls). These tests drive the
// real clients, node-postgres and mysql2 (npm, pinned in
// bench/capture/node/package-lock.json, installed by scripts/node-clients.sh),
// each process holding a TLS and a plaintext connection, and want every
// marked statement exactly once per side with the right side, transport,
// library, comm and addresses, and no unread record of theirs.

// nodeModules is where scripts/node-clients.sh installs the clients.
const nodeModules = "/var/cache/cistern/node/node_modules"

func needNode(t *testing.T) string {
	t.Helper()
	node := testenv.NeedTool(t, "node", "nodejs (Node.js 20, from nodejs.org or NodeSource)")
	testenv.NeedFile(t, nodeModules+"/pg", "scripts/node-clients.sh (sudo make deps runs it)")
	testenv.NeedFile(t, nodeModules+"/mysql2", "scripts/node-clients.sh (sudo make deps runs it)")
	return node
}

// nodeProc is one client.js process.
type nodeProc struct {
	cmd   *exec.Cmd
	tok   string
	n     int
	early bool
	stdin io.WriteCloser
	ready chan struct{}
	done  chan error
}

func startNode(t *testing.T, node, kind string, port int, tok string, n int, env []string, flags ...string) *nodeProc {
	t.Helper()
	script, err := filepath.Abs("../bench/capture/node/client.js")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, append([]string{script, kind, strconv.Itoa(port), tok, strconv.Itoa(n)}, flags...)...)
	cmd.Env = append(append(os.Environ(), "NODE_PATH="+nodeModules), env...)
	p := &nodeProc{cmd: cmd, tok: tok, n: n, ready: make(chan struct{}), done: make(chan error, 1)}
	for _, f := range flags {
		p.early = p.early || f == "--early"
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(p.ready)
			}
		}
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("node client %s: %v: %s", tok, err, errOut.String())
		}
		p.done <- err
	}()
	return p
}

// nodeWant is what a marked statement's records must say.
type nodeWant struct {
	serverComm, serverTLSLib string
	port                     int
	user, db                 string // of every connection the capture saw start
}

// collectNode reads c until every process has exited and 2 s passed idle,
// and returns the records of the marked statements (by mark and side) and
// the unread records of the processes.
func collectNode(t *testing.T, c *Capture, procs []*nodeProc) (map[[2]string][]Query, []Query) {
	t.Helper()
	got := map[[2]string][]Query{}
	pids := map[uint32]bool{}
	for _, p := range procs {
		pids[uint32(p.cmd.Process.Pid)] = true
	}
	var unread []Query
	exited := 0
	limit := 3 * time.Minute * testenv.TimeScale() // an emulated guest starts node slowly
	for idle, end := time.Now(), time.Now().Add(limit); time.Now().Before(end); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Unread && pids[q.PID] {
				unread = append(unread, q)
			}
			for _, p := range procs {
				if i := strings.Index(q.Query, "'n-"+p.tok+"-"); i >= 0 {
					m := strings.TrimSuffix(strings.Fields(q.Query[i+1:])[0], "'")
					got[[2]string{m, q.Side}] = append(got[[2]string{m, q.Side}], q)
				}
			}
		}
		if len(qs) > 0 {
			idle = time.Now()
		}
		for _, p := range procs {
			select {
			case err := <-p.done:
				if err != nil {
					t.Fatal(err)
				}
				exited++
				idle = time.Now()
			default:
			}
		}
		if exited == len(procs) && time.Since(idle) > 2*time.Second {
			break
		}
	}
	if exited != len(procs) {
		t.Fatalf("%d of %d node clients finished in %v", exited, len(procs), limit)
	}
	return got, unread
}

// checkNode wants every mark of procs once per side, with its transport,
// library, comm and the address pair joined across the sides.
func checkNode(t *testing.T, c *Capture, procs []*nodeProc, w nodeWant) {
	t.Helper()
	got, unread := collectNode(t, c, procs)
	// Only the connection older than the capture is announced, at its
	// end, as start_missed (its handshake was not seen; its queries are).
	early := map[uint32]int{}
	for _, p := range procs {
		if p.early {
			early[uint32(p.cmd.Process.Pid)] = 1
		}
	}
	for _, q := range unread {
		if q.UnreadReason == UnreadStartMissed && early[q.PID] > 0 {
			early[q.PID]--
			continue
		}
		t.Errorf("unread record of a node client: %+v", q)
	}
	st, _ := c.Stats()
	t.Logf("channel: %+v; gaps %d; skipped %d; %s", st, len(c.Gaps()), c.BadBytes(), c.LastAttachError())
	total, missing, dup := 0, 0, 0
	for _, p := range procs {
		type mk struct{ mode, kind string }
		marks := []mk{{"tls", "s"}, {"tls", "e"}, {"plain", "s"}, {"plain", "e"}}
		if p.early {
			marks = append(marks, mk{"early", "s"})
		}
		for i := 0; i < p.n; i++ {
			for _, m := range marks {
				mark := fmt.Sprintf("n-%s-%s-%s-%d", p.tok, m.mode, m.kind, i)
				var pair [2]Query
				for si, side := range []string{SideClient, SideServer} {
					total++
					qs := got[[2]string{mark, side}]
					if len(qs) == 0 {
						missing++
						t.Errorf("%s (%s): not captured", mark, side)
						continue
					}
					if len(qs) > 1 {
						dup++
						t.Errorf("%s (%s): captured %d times", mark, side, len(qs))
					}
					q := qs[0]
					pair[si] = q
					tr, lib, comm := TransportTLS, LibOpenSSLStatic, "node"
					if side == SideServer {
						lib, comm = w.serverTLSLib, w.serverComm
					}
					if m.mode == "plain" {
						tr, lib = TransportPlain, LibNone
					}
					if q.Transport != tr || q.Library != lib || q.Comm != comm || q.Error != "" || q.Rows != 1 {
						t.Errorf("%s (%s): transport %q library %q comm %q error %q rows %d; want %s %s %s", mark, side,
							q.Transport, q.Library, q.Comm, q.Error, q.Rows, tr, lib, comm)
					}
					user, db, unknown := w.user, w.db, ""
					if m.mode == "early" {
						user, db, unknown = "", "", UserStartedBefore
					}
					if q.User != user || q.Database != db || q.UserUnknown != unknown {
						t.Errorf("%s (%s): user %q database %q user_unknown %q; want %q %q %q", mark, side,
							q.User, q.Database, q.UserUnknown, user, db, unknown)
					}
					if side == SideClient && q.PID != uint32(p.cmd.Process.Pid) {
						t.Errorf("%s (client): pid %d, want %d", mark, q.PID, p.cmd.Process.Pid)
					}
				}
				cl, sv := pair[0], pair[1]
				pgEnd := "127.0.0.1:" + strconv.Itoa(w.port)
				if cl.Query != "" && sv.Query != "" && (cl.Remote != pgEnd || sv.Local != pgEnd ||
					cl.Local != sv.Remote || !strings.HasPrefix(cl.Local, "127.0.0.1:")) {
					t.Errorf("%s: client %q -> %q, server %q <- %q: not one connection to %s", mark,
						cl.Local, cl.Remote, sv.Local, sv.Remote, pgEnd)
				}
			}
		}
	}
	t.Logf("%d marked statements × sides: %d missing, %d captured more than once", total, missing, dup)
}

// TestCaptureNodePostgres: node-postgres over TLS (simple and extended
// protocol) and plaintext, from short-lived processes started after the
// capture that query at once (with and without --hold-new), and from a
// long-lived one started before it, whose older TLS connection is read from
// the capture's start.
func TestCaptureNodePostgres(t *testing.T) {
	testenv.RequireRoot(t)
	node := needNode(t)
	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54357, Conf: tc.PostgresConf()})
	w := nodeWant{serverComm: "postgres", serverTLSLib: LibOpenSSL, port: pg.Opt.Port, user: "postgres", db: "postgres"}
	testNodeClients(t, node, "pg", pg.Opt.Port, w, Options{All: true})
}

// TestCaptureNodeMySQL: mysql2 over TLS and plaintext against MariaDB
// (COM_QUERY and prepared statements).
func TestCaptureNodeMySQL(t *testing.T) {
	testenv.RequireRoot(t)
	node := needNode(t)
	tc := testenv.TLSCert(t)
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: 53311, TLS: tc})
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	w := nodeWant{serverComm: "mariadbd", serverTLSLib: LibOpenSSL, port: m.Opt.Port, user: "root"}
	testNodeClients(t, node, "mysql", m.Opt.Port, w, Options{All: true, Protocol: "mysql"})
}

func testNodeClients(t *testing.T, node, kind string, port int, w nodeWant, opt Options) {
	testenv.Exclusive(t, testenv.Traffic) // --all: not beside another package's loopback flood
	base := strconv.FormatInt(time.Now().UnixNano(), 36)
	short := func(t *testing.T, opt Options) {
		c, err := Open(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var procs []*nodeProc
		for i := 0; i < 4; i++ {
			procs = append(procs, startNode(t, node, kind, port, fmt.Sprintf("%s%sx%d", base, t.Name()[len(t.Name())-1:], i), 3, nil))
		}
		checkNode(t, c, procs, w)
		for _, s := range c.AttachSamples() {
			if s.Kind == LibOpenSSLStatic {
				t.Logf("node attached on exec in %v (cached %v, held %v)", s.Latency, s.Cached, s.Held)
			}
		}
		if cn, _ := c.Counters(); cn["libraries_attached"] == 0 {
			t.Errorf("no library attached: %v", c.LastAttachError())
		}
	}
	t.Run("short", func(t *testing.T) { short(t, opt) })
	hold := opt
	hold.HoldNew = true
	t.Run("short-hold", func(t *testing.T) { short(t, hold) })
	t.Run("long", func(t *testing.T) {
		p := startNode(t, node, kind, port, base+"long", 20, nil, "--early", "--wait")
		select {
		case <-p.ready:
		case err := <-p.done:
			t.Fatal(err)
		case <-time.After(time.Minute * testenv.TimeScale()):
			t.Fatal("the node client did not connect in time")
		}
		c, err := Open(opt)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p.stdin.Write([]byte("go\n"))
		checkNode(t, c, []*nodeProc{p}, w)
	})
}
