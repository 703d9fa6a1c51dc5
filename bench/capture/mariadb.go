package capturebench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/cistern-ebpf/cistern/accum"
	"github.com/cistern-ebpf/cistern/capture"
	"github.com/cistern-ebpf/cistern/internal/servers"
)

// The MariaDB variant: sysbench oltp_point_select over TLS, one prepared
// statement (COM_STMT_PREPARE once per connection, then COM_STMT_EXECUTE
// per query), untraced and through the accumulated channel.

var reSysbenchQueries = regexp.MustCompile(`queries:\s+(\d+)\s+\(([0-9.]+) per sec`)

// sysbenchQuery tells oltp_point_select's statement from sysbench's others.
func sysbenchQuery(q string) bool { return strings.HasPrefix(q, "SELECT c FROM sbtest1 WHERE id=") }

type mariadbBench struct {
	m   *servers.MariaDB
	dir string // sysbench's working directory: it reads its TLS files from there
}

func startMariaDBBench(ctx context.Context, cert *servers.TLSCert, port int) (*mariadbBench, error) {
	if _, err := exec.LookPath("sysbench"); err != nil {
		return nil, fmt.Errorf("sysbench %w: run sudo make deps", servers.ErrNotInstalled)
	}
	m, err := servers.StartMariaDB(servers.MariaDBOptions{Port: port, TLS: cert})
	if err != nil {
		return nil, err
	}
	b := &mariadbBench{m: m}
	if b.dir, err = os.MkdirTemp("", "cistern-sysbench-"); err != nil {
		b.stop()
		return nil, err
	}
	// sysbench --mysql-ssl=on presents client-cert.pem/client-key.pem and
	// trusts cacert.pem from its working directory: the self-signed
	// certificate serves as all three.
	for dst, src := range map[string]string{"cacert.pem": cert.Cert, "client-cert.pem": cert.Cert, "client-key.pem": cert.Key} {
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(b.dir, dst), data, 0o600)
		}
		if err != nil {
			b.stop()
			return nil, err
		}
	}
	if out, err := m.Client("CREATE DATABASE sbtest;"); err != nil {
		b.stop()
		return nil, fmt.Errorf("create database: %v: %s", err, out)
	}
	prep := b.sysbench(ctx, "prepare", 0, 1)
	if out, err := prep.CombinedOutput(); err != nil {
		b.stop()
		return nil, fmt.Errorf("sysbench prepare: %v: %s", err, out)
	}
	return b, nil
}

func (b *mariadbBench) stop() {
	b.m.Stop()
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

func (b *mariadbBench) sysbench(ctx context.Context, verb string, secs, threads int) *exec.Cmd {
	args := []string{"oltp_point_select", "--db-driver=mysql", "--mysql-host=127.0.0.1",
		"--mysql-port=" + strconv.Itoa(b.m.Opt.Port), "--mysql-user=root", "--mysql-db=sbtest",
		"--tables=1", "--table-size=10000", "--mysql-ssl=on"}
	if verb == "run" {
		args = append(args, "--time="+strconv.Itoa(secs), "--threads="+strconv.Itoa(threads))
	}
	c := exec.CommandContext(ctx, "sysbench", append(args, verb)...)
	c.Dir = b.dir
	return c
}

// runSysbench runs sysbench untraced, or traced by the accumulated channel
// (attached while sysbench is stopped, before it connects).
func runSysbench(ctx context.Context, b *mariadbBench, traced bool, ring uint32, opt Options) (captureResult, error) {
	pb, err := startStopped(func() *exec.Cmd {
		return b.sysbench(ctx, "run", max(1, int(opt.Duration.Seconds())), opt.Clients)
	}, traced)
	if err != nil {
		return captureResult{}, err
	}
	result := func(err error) (sent, qps float64, e error) {
		if err != nil {
			return 0, 0, fmt.Errorf("sysbench: %v: %s", err, pb.out.String())
		}
		m := reSysbenchQueries.FindStringSubmatch(pb.out.String())
		if m == nil {
			return 0, 0, fmt.Errorf("sysbench output not understood: %s", pb.out.String())
		}
		sent, _ = strconv.ParseFloat(m[1], 64)
		qps, _ = strconv.ParseFloat(m[2], 64)
		return sent, qps, nil
	}
	if !traced {
		sent, qps, err := result(<-pb.done)
		return captureResult{sent: sent, tps: qps, ok: true}, err
	}
	c, err := capture.Open(capture.Options{PID: pb.cmd.Process.Pid, Protocol: "mysql", Transport: capture.TransportTLS,
		Accum: accum.Config{RingSize: ring}})
	if err != nil {
		pb.kill()
		return captureResult{}, err
	}
	defer c.Close()
	return measureCapture(pb, c, func(q capture.Query) bool { return sysbenchQuery(q.Query) && q.Error == "" }, result)
}
