package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exposure are the flags that open something to other processes or
// machines: listening addresses, sockets, and where captured data goes.
var exposure = map[string]bool{"metrics": true, "listen": true, "serve": true, "socket": true, "otlp": true, "out": true}

// listening are those of exposure that listen on TCP.
var listening = map[string]bool{"metrics": true, "listen": true, "serve": true}

// eachFlag calls fn for every flag of every command under c.
func eachFlag(c *cobra.Command, fn func(path string, f *pflag.Flag)) {
	c.LocalFlags().VisitAll(func(f *pflag.Flag) { fn(c.CommandPath(), f) })
	for _, sub := range c.Commands() {
		eachFlag(sub, fn)
	}
}

// TestListenDefaults: no command listens anywhere unless told, and when a
// listening flag has a default it is a loopback address; any HOST:PORT
// default at all is loopback. Every flag that listens, makes a socket,
// sends captured data away or writes it to a file is listed in
// docs/security.md, on a line naming its command.
func TestListenDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	n := 0
	eachFlag(newRoot(), func(path string, f *pflag.Flag) {
		def := f.DefValue
		if host, port, err := net.SplitHostPort(def); err == nil && port != "" || listening[f.Name] && def != "" {
			n++
			if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
				t.Errorf("%s --%s: default %q is not a loopback address", path, f.Name, def)
			}
		}
		if !exposure[f.Name] || strings.HasPrefix(path, "cistern bench") || strings.HasPrefix(path, "cistern demo") {
			return
		}
		cmd := "`" + path + "`"
		for _, l := range lines {
			if strings.Contains(l, cmd) && strings.Contains(l, "--"+f.Name) {
				return
			}
		}
		t.Errorf("docs/security.md has no line naming %s and --%s (default %q)", cmd, f.Name, def)
	})
	if n == 0 {
		t.Error("no command has a listening default: the walk found nothing to check (exporter --listen has one)")
	}
}

// TestNoWorldReadableOutput: the packages behind the daemons create no file
// another user could read: os.Create (0666 before the umask) is not used,
// and os.WriteFile and os.OpenFile give 0600 or less (0: a file that must
// exist, such as a cgroup's control files). Captured data goes through
// cli.CreatePrivate.
func TestNoWorldReadableOutput(t *testing.T) {
	dirs := []string{".", "../../capture", "../../capture/otlp", "../../query", "../../query/exec", "../../query/exporter",
		"../../cbuf", "../../cbuf/kcomp", "../../kv", "../../pagecache", "../../pool", "../../kernel", "../../internal/metrics"}
	checked := 0
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "os" {
					return true
				}
				where := fset.Position(call.Pos())
				switch sel.Sel.Name {
				case "Create":
					t.Errorf("%s: os.Create makes 0666 files: use cli.CreatePrivate", where)
				case "WriteFile", "OpenFile":
					lit, ok := call.Args[2].(*ast.BasicLit)
					if !ok {
						t.Errorf("%s: os.%s with a mode that is not a literal: want 0600 or less, visibly", where, sel.Sel.Name)
						break
					}
					if mode, err := strconv.ParseUint(strings.Replace(lit.Value, "0o", "0", 1), 0, 32); err != nil || mode&0o077 != 0 {
						t.Errorf("%s: os.%s with mode %s: want 0600 or less", where, sel.Sel.Name, lit.Value)
					}
				}
				return true
			})
		}
	}
	if checked < 50 {
		t.Errorf("checked %d files: the walk missed the sources", checked)
	}
}
