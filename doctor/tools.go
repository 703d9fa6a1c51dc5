package doctor

import (
	"os/exec"
	"path/filepath"
	"strings"
)

// tool is an external program Cistern drives, and the Debian package with it.
type tool struct {
	name, pkg, why string
	find           func() (string, bool)
}

func onPath(bin string) func() (string, bool) {
	return func() (string, bool) {
		p, err := exec.LookPath(bin)
		return p, err == nil
	}
}

// postgresBin finds Debian's versioned PostgreSQL server binary.
func postgresBin() (string, bool) {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(m) == 0 {
		return "", false
	}
	return m[len(m)-1], true
}

var tools = []tool{
	{"clang-19", "clang-19", "compiles BPF programs (make generate)", onPath("clang-19")},
	{"bpftool", "bpftool", "generates vmlinux.h", onPath("bpftool")},
	{"memcached", "memcached", "Kerby-KV's source of truth", onPath("memcached")},
	{"postgresql", "postgresql", "capture tests and bench", postgresBin},
	{"pgbench", "postgresql-contrib", "capture bench load", func() (string, bool) {
		if p, ok := onPath("pgbench")(); ok {
			return p, ok
		}
		m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
		return strings.Join(m, ""), len(m) > 0
	}},
	{"mariadb", "mariadb-server", "MySQL-protocol capture tests and bench", onPath("mariadbd")},
	{"sysbench", "sysbench", "MariaDB capture bench load", onPath("sysbench")},
	{"fio", "fio", "page-cache and query bench load", onPath("fio")},
	{"ripgrep", "ripgrep", "page-cache file-search bench", onPath("rg")},
	{"bpftrace", "bpftrace", "the reference tracer benches compare with", onPath("bpftrace")},
	{"ethtool", "ethtool", "turns off veth tx checksum for native XDP_TX", onPath("ethtool")},
	{"iproute2", "iproute2", "runs servers inside network namespaces", onPath("ip")},
}

func toolChecks() []Check {
	var cs []Check
	for _, t := range tools {
		if p, found := t.find(); found {
			cs = append(cs, Check{Name: t.name, Status: OK, Detail: p + " (" + t.why + ")"})
		} else {
			cs = append(cs, Check{Name: t.name, Status: Missing, Detail: "not installed (" + t.why + ")",
				Fix: "apt-get install -y " + t.pkg + "  (or: sudo make deps)"})
		}
	}
	return cs
}
