package capture

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestUnreadReasonJava: a JVM's TLS (JSSE, no probes) is announced as an
// unread connection whose reason names it, java_tls, not no_tls_probe.
func TestUnreadReasonJava(t *testing.T) {
	testenv.RequireRoot(t)
	javac := testenv.NeedTool(t, "javac", "default-jdk-headless")
	java := testenv.NeedTool(t, "java", "default-jre-headless")
	tc := testenv.TLSCert(t)
	testenv.Exclusive(t, testenv.Traffic) // --all
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, "testdata/java/TLSClient.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v: %s", err, out)
	}
	cert, err := tls.LoadX509KeyPair(tc.Cert, tc.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Write([]byte(line))
			conn.Close()
		}
	}()
	c, err := Open(Options{All: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := exec.Command(java, "-cp", dir, "TLSClient", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "hello from java\n" {
		t.Fatalf("java client: %v: %q", err, out)
	}
	pid := uint32(cmd.Process.Pid)
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		qs, err := c.Next(100 * time.Millisecond)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.PID != pid {
				continue
			}
			if !q.Unread || q.UnreadReason != UnreadJava || q.Transport != TransportTLS || q.BytesSent == 0 || q.BytesReceived == 0 {
				t.Fatalf("java's record: %+v; want unread, java_tls, tls, bytes both ways", q)
			}
			return
		}
	}
	t.Fatalf("no unread record of the java client (pid %d) in 30 s", pid)
}
