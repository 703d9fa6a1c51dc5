package capture

import (
	"debug/elf"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestFindSSLObj: the TLS library in node's own symbol table is OpenSSL
// linked in (openssl-static) at the offsets nm gives, libssl.so.3 is
// openssl, and a file without one says so (errNoSSL).
func TestFindSSLObj(t *testing.T) {
	node := testenv.NeedTool(t, "node", "nodejs (Node.js 20, from nodejs.org or NodeSource)")
	nm := testenv.NeedTool(t, "nm", "binutils")
	libssl := sysLibSSL(t, testenv.NeedTool(t, "openssl", "openssl"))
	for _, c := range []struct{ path, kind string }{{node, LibOpenSSLStatic}, {libssl, LibOpenSSL}, {"/bin/true", ""}} {
		f, err := elf.Open(c.path)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		o, err := findSSLObj(f, c.path)
		t.Logf("%s: %v", c.path, time.Since(t0))
		f.Close()
		if c.kind == "" {
			if !errors.Is(err, errNoSSL) {
				t.Errorf("%s: %v, %v; want errNoSSL", c.path, o, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if o.kind != c.kind {
			t.Errorf("%s: kind %q, want %q", c.path, o.kind, c.kind)
		}
		out, err := exec.Command(nm, "-D", "--defined-only", c.path).Output()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]uint64{}
		for _, l := range strings.Split(string(out), "\n") {
			fs := strings.Fields(l)
			if len(fs) != 3 {
				continue
			}
			name, _, _ := strings.Cut(fs[2], "@") // SSL_read@@OPENSSL_3.0.0
			if name == "SSL_read" || name == "SSL_write" {
				want[name], _ = strconv.ParseUint(fs[0], 16, 64)
			}
		}
		f, _ = elf.Open(c.path)
		for name, addr := range want {
			off, err := fileOffset(f, addr)
			if err != nil || o.syms[name] != off {
				t.Errorf("%s: %s at %#x, nm says %#x (file offset %#x, %v)", c.path, name, o.syms[name], addr, off, err)
			}
		}
		f.Close()
		if len(want) != 2 {
			t.Errorf("%s: nm lists %v", c.path, want)
		}
	}
}
