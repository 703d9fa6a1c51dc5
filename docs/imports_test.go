package docs

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cistern-ebpf/cistern/"

// pkg is one package of the tree as go list sees it, paths relative to the
// module.
type pkg struct {
	path    string
	imports []string // its own files' and its tests' direct imports
	deps    []string // everything its own files pull in, transitively
}

// listPackages runs go list over the whole tree (go test runs under the go
// command, so it is there).
func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}|{{join .Deps " "}}`,
		"../...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	ours := func(s string) []string {
		var r []string
		for _, f := range strings.Fields(s) {
			if p, ok := strings.CutPrefix(f, module); ok {
				r = append(r, p)
			}
		}
		return r
	}
	var ps []pkg
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(l, "|", 3)
		if len(f) != 3 {
			t.Fatalf("go list line %q", l)
		}
		ps = append(ps, pkg{path: strings.TrimPrefix(f[0], module), imports: ours(f[1]), deps: ours(f[2])})
	}
	if len(ps) < 40 {
		t.Fatalf("go list found only %d packages", len(ps))
	}
	return ps
}

func under(p string, roots ...string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// TestLayers keeps the arrows between the rooms pointing one way:
//   - exit codes are cmd's: packages return their own typed errors, so no
//     package outside cmd/ and internal/cli imports internal/cli;
//   - product code uses no bench code: only cmd/ and the benches reach
//     bench/ and internal/benchkit (charts are internal/plot's);
//   - kernel is the bottom room: it uses no other package of the tree (not
//     internal/netenv, the tests' and benches' namespaces).
func TestLayers(t *testing.T) {
	ps := listPackages(t)
	bench := func(p string) bool { return under(p, "bench", "internal/benchkit") }
	for _, p := range ps {
		if !under(p.path, "cmd", "internal/cli") && slices.Contains(p.imports, "internal/cli") {
			t.Errorf("%s imports internal/cli: return a typed error of its own and map it to an exit code in cmd/", p.path)
		}
		if !under(p.path, "cmd") && !bench(p.path) {
			for _, d := range p.deps {
				if bench(d) {
					t.Errorf("%s depends on the bench package %s", p.path, d)
				}
			}
		}
		if p.path == "kernel" {
			for _, d := range p.deps {
				t.Errorf("kernel depends on %s: kernel is the bottom room", d)
			}
		}
	}
}
