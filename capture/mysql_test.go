package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func myPkt(seq byte, payload ...[]byte) []byte {
	var p []byte
	for _, b := range payload {
		p = append(p, b...)
	}
	n := len(p)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, p...)
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

// TestMySQLParser feeds a client's view of a session (greeting, login,
// COM_QUERY with a result set, an error, COM_STMT_PREPARE/EXECUTE with a
// binary result set, an INSERT's OK) in fragments of several sizes, with and
// without CLIENT_DEPRECATE_EOF, plus garbage that must be counted.
func TestMySQLParser(t *testing.T) {
	for _, deprecate := range []bool{false, true} {
		for _, split := range []int{1, 5, 1 << 20} {
			t.Run(fmt.Sprint(deprecate, split), func(t *testing.T) { testMySQLParser(t, deprecate, split) })
		}
	}
}

func testMySQLParser(t *testing.T, deprecate bool, split int) {
	p := newMyConn(9)
	var got []Query
	feed := func(dir accum.Direction, b []byte, ts uint64) {
		for i := 0; i < len(b); i += split {
			j := min(i+split, len(b))
			got = p.feed(got, dir, b[i:j], fragTimes{first: ts, last: ts, opens: i == 0, closes: j == len(b)}, 42)
		}
	}
	caps := uint32(capProtocol41 | capSecureConn | capConnectWithDB | capPluginAuth)
	if deprecate {
		caps |= capDeprecateEOF
	}
	eof := func(seq byte) []byte {
		if deprecate {
			return myPkt(seq, []byte{0xfe, 0, 0, 2, 0, 0, 0})
		}
		return myPkt(seq, []byte{0xfe, 0, 0, 2, 0})
	}
	colsEOF := func(seq byte) []byte {
		if deprecate {
			return nil
		}
		return myPkt(seq, []byte{0xfe, 0, 0, 2, 0})
	}
	col := []byte("\x03def\x00\x00\x00\x01a\x00\x0c\x3f\x00\x0b\x00\x00\x00\x03\x00\x00\x00\x00\x00")
	feed(accum.Read, myPkt(0, []byte{10}, []byte("10.11.19-MariaDB\x00"), make([]byte, 40)), 1)
	feed(accum.Write, myPkt(1, le32(caps), le32(1<<24), []byte{33}, make([]byte, 23), []byte("app\x00"), []byte{3, 1, 2, 3}, []byte("shop\x00mysql_native_password\x00")), 2)
	feed(accum.Read, myPkt(2, []byte{0, 0, 0, 2, 0, 0, 0}), 3)
	// COM_QUERY, two columns, three rows.
	feed(accum.Write, myPkt(0, []byte{comQuery}, []byte("SELECT a, b FROM t")), 1000)
	var rs []byte
	rs = append(rs, myPkt(1, []byte{2})...)
	rs = append(rs, myPkt(2, col)...)
	rs = append(rs, myPkt(3, col)...)
	rs = append(rs, colsEOF(4)...)
	for i := range 3 {
		rs = append(rs, myPkt(byte(5+i), []byte{1, '1', 1, 'x'})...)
	}
	rs = append(rs, eof(8)...)
	feed(accum.Read, rs, 3000)
	// An error.
	feed(accum.Write, myPkt(0, []byte{comQuery}, []byte("SELECT * FROM nope")), 4000)
	feed(accum.Read, myPkt(1, []byte{0xff}, le16(1146), []byte("#42S02Table 'shop.nope' doesn't exist")), 4500)
	// Garbage from the server while nothing is asked: counted, skipped.
	feed(accum.Read, myPkt(1, []byte("garbage")), 4600)
	// Prepare (one parameter, one column), execute, binary rows.
	feed(accum.Write, myPkt(0, []byte{comStmtPrepare}, []byte("SELECT a FROM t WHERE b = ?")), 5000)
	var prep []byte
	prep = append(prep, myPkt(1, []byte{0}, le32(7), le16(1), le16(1), []byte{0, 0, 0})...)
	prep = append(prep, myPkt(2, col)...)
	prep = append(prep, colsEOF(3)...)
	prep = append(prep, myPkt(4, col)...)
	prep = append(prep, colsEOF(5)...)
	feed(accum.Read, prep, 5100)
	feed(accum.Write, myPkt(0, []byte{comStmtExecute}, le32(7), []byte{0, 1, 0, 0, 0, 0, 1, 0xfe, 0, 1, 'x'}), 6000)
	var ex []byte
	ex = append(ex, myPkt(1, []byte{1})...)
	ex = append(ex, myPkt(2, col)...)
	ex = append(ex, colsEOF(3)...)
	ex = append(ex, myPkt(4, []byte{0, 0, 1, 0, 0, 0})...)
	ex = append(ex, myPkt(5, []byte{0, 0, 2, 0, 0, 0})...)
	ex = append(ex, eof(6)...)
	feed(accum.Read, ex, 6200)
	// OK with affected rows.
	feed(accum.Write, myPkt(0, []byte{comQuery}, []byte("INSERT INTO t VALUES (1),(2),(3),(4)")), 7000)
	feed(accum.Read, myPkt(1, []byte{0, 4, 0, 2, 0, 0, 0}), 7100)

	want := []Query{
		{Query: "SELECT a, b FROM t", Rows: 3, LatencyUS: 2},
		{Query: "SELECT * FROM nope", Error: "ERROR 1146 (42S02): Table 'shop.nope' doesn't exist", LatencyUS: 0.5},
		{Query: "SELECT a FROM t WHERE b = ?", Rows: 2, LatencyUS: 0.2},
		{Query: "INSERT INTO t VALUES (1),(2),(3),(4)", Rows: 4, LatencyUS: 0.1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d queries %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Query != w.Query || g.Rows != w.Rows || g.Error != w.Error || g.LatencyUS != w.LatencyUS ||
			g.User != "app" || g.Database != "shop" || g.Protocol != "mysql" || g.PID != 42 {
			t.Errorf("query %d: got %+v, want %+v", i, g, w)
		}
	}
	if p.bad() != 7 {
		t.Errorf("bad bytes %d, want 7 (the garbage packet's payload)", p.bad())
	}
}

// TestCaptureMariaDB runs the mariadb client against a real MariaDB over
// TLS (uprobes on libssl) and plaintext (socket syscalls), and checks the
// captured statements against the issued ones.
func TestCaptureMariaDB(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: 53308, TLS: tc})
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	issued := []string{
		"SELECT 1 AS one;",
		"CREATE DATABASE IF NOT EXISTS capture_db;",
		"CREATE TABLE capture_db.t (a int, b text);",
		"INSERT INTO capture_db.t VALUES (1, 'x'), (2, 'y'), (3, 'z');",
		"SELECT * FROM capture_db.no_such_table;",
		"SELECT b FROM capture_db.t WHERE a >= 2 ORDER BY a;",
		"DROP DATABASE capture_db;",
	}
	wantRows := []int64{1, 1, 0, 3, 0, 2, 1}
	for _, tr := range []struct {
		name, ssl string
		opt       Options
	}{
		// Both transports (the default) over a TLS session: the MySQL SSL
		// request is plaintext, then the socket carries TLS.
		{"tls", "--ssl", Options{Protocol: "mysql"}},
		{"tls-only", "--ssl", Options{Protocol: "mysql", Transport: TransportTLS}},
		{"plain", "--skip-ssl", Options{Protocol: "mysql", Transport: TransportPlain}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			cl := exec.Command("mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", strconv.Itoa(m.Opt.Port), "-u", "root",
				tr.ssl, "--batch", "--force", "--skip-column-names")
			run, err := CaptureClient(cl, issued, tr.opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("client output: %q", run.Output)
			var got []Query
			for _, q := range run.Queries {
				t.Logf("captured: %+v", q)
				// The client's own session set-up is not ours to count.
				if q.Query != "select @@version_comment limit 1" {
					got = append(got, q)
				}
			}
			if len(got) != len(issued) {
				t.Fatalf("captured %d statements, issued %d", len(got), len(issued))
			}
			for i, q := range got {
				if q.Query+";" != issued[i] && q.Query != issued[i] {
					t.Errorf("statement %d: captured %q, issued %q", i, q.Query, issued[i])
				}
				if q.Rows != wantRows[i] {
					t.Errorf("statement %d (%s): %d rows, want %d", i, q.Query, q.Rows, wantRows[i])
				}
				if (i == 4) != (q.Error != "") {
					t.Errorf("statement %d (%s): error %q", i, q.Query, q.Error)
				}
				// (The login happens before the capture attaches: user and
				// database are checked by TestMySQLParser.)
				if q.Protocol != "mysql" || q.PID == 0 || q.PID != got[0].PID {
					t.Errorf("statement %d: protocol %s pid %d", i, q.Protocol, q.PID)
				}
			}
			if st := run.Stats; st.LostRecords != 0 || st.LostBytes != 0 || len(run.Gaps) != 0 || run.BadBytes != 0 {
				t.Errorf("loss: %+v gaps %v bad bytes %d", st, run.Gaps, run.BadBytes)
			}
		})
	}
}

// TestCaptureMariaDBServerBoth: mariadbd is one process serving every
// connection from its threads, so it holds TLS and plaintext connections
// at once. Two mariadb clients, one --ssl and one --skip-ssl, send 30
// marked statements each at the same time; the capture of mariadbd (by
// pid, both transports) sees each once, on the server side, with its
// transport.
func TestCaptureMariaDBServerBoth(t *testing.T) {
	testenv.RequireRoot(t)
	tc := testenv.TLSCert(t)
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: 53309, TLS: tc})
	if testenv.NotInstalled(t, err); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	pid, err := m.PID()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{PID: pid, Protocol: "mysql"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 30
	tok := strconv.FormatInt(time.Now().UnixNano(), 36)
	done := make(chan error, 2)
	for _, mode := range []string{"tls", "plain"} {
		flag := map[string]string{"tls": "--ssl", "plain": "--skip-ssl"}[mode]
		cl := exec.Command("mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", strconv.Itoa(m.Opt.Port), "-u", "root",
			flag, "--batch", "--skip-column-names")
		var sb strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&sb, "SELECT 'y-%s-%s-%d' AS mark;\n", tok, mode, i)
		}
		cl.Stdin = strings.NewReader(sb.String())
		if err := cl.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cl.Wait() }()
	}
	got := map[string][]Query{}
	exited := 0
	for idle, end := time.Now(), time.Now().Add(time.Minute); time.Now().Before(end); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		for _, q := range qs {
			if i := strings.Index(q.Query, "'y-"+tok+"-"); i >= 0 {
				k := strings.TrimSuffix(strings.Fields(q.Query[i+1:])[0], "'")
				got[k] = append(got[k], q)
			}
		}
		if len(qs) > 0 {
			idle = time.Now()
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("mariadb client: %v", err)
			}
			exited++
			idle = time.Now()
		default:
		}
		if exited == 2 && time.Since(idle) > 2*time.Second {
			break
		}
	}
	if exited != 2 {
		t.Fatal("the clients did not finish in a minute")
	}
	for _, mode := range []string{"tls", "plain"} {
		lib := map[string]string{"tls": "openssl", "plain": "none"}[mode]
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("y-%s-%s-%d", tok, mode, i)
			qs := got[k]
			if len(qs) != 1 {
				t.Errorf("%s captured %d times, want once", k, len(qs))
				continue
			}
			q := qs[0]
			if q.Transport != mode || q.Library != lib || q.Side != SideServer || int(q.PID) != pid || q.Local != m.Addr() {
				t.Errorf("%s: transport %q library %q side %q pid %d local %q", k, q.Transport, q.Library, q.Side, q.PID, q.Local)
			}
		}
	}
	if st, _ := c.Stats(); st.LostRecords != 0 || len(c.Gaps()) != 0 || c.BadBytes() != 0 {
		t.Errorf("loss or unparseable bytes: %+v, gaps %v, skipped %d", st, c.Gaps(), c.BadBytes())
	}
}
