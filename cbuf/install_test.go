package cbuf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// installClient is a user's first program: it connects, allocates, writes and
// frees one buffer, and prints what it saw.
const installClient = `#include <cbuf.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
	cbuf_t id;
	int rc = cbuf_connect(argv[1]);
	if (rc != 0) { printf("connect %d\n", rc); return 1; }
	char *p = cbuf_alloc(100, &id);
	if (!p) { printf("alloc failed\n"); return 1; }
	strcpy(p, "hello");
	printf("ok %zu\n", cbuf_size(id));
	cbuf_free(id);
	cbuf_disconnect();
	return 0;
}
`

// buildAndRunClient compiles installClient with nothing but what
// `pkg-config --cflags --libs cbuf` says (pcPath selects the .pc file), runs
// it against a live manager and returns its output.
func buildAndRunClient(t *testing.T, shell string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client.c"), []byte(installClient), 0o644); err != nil {
		t.Fatal(err)
	}
	_, sock := startManager(t, ManagerOptions{})
	cmd := exec.Command("sh", "-c", shell)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SOCK="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

func needInstallTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"cc", "make", "pkg-config"} {
		testenv.NeedTool(t, tool, map[string]string{"cc": "gcc", "make": "make", "pkg-config": "pkg-config"}[tool])
	}
}

// A private prefix: pkg-config alone must give a program that starts, with no
// LD_LIBRARY_PATH and no ldconfig entry for the prefix.
func TestInstallPrivatePrefixPkgConfig(t *testing.T) {
	needInstallTools(t)
	lib, _ := filepath.Abs("../lib/cbuf")
	prefix := t.TempDir()
	build := t.TempDir()
	out := buildAndRunClient(t, `set -e
make -s -C `+lib+` O=`+build+` PREFIX=`+prefix+` install
export PKG_CONFIG_PATH=`+prefix+`/lib/pkgconfig
cc client.c $(pkg-config --cflags --libs cbuf) -o client
unset LD_LIBRARY_PATH
./client "$SOCK"`)
	if !strings.Contains(out, "ok 4096") {
		t.Fatalf("client output: %q", out)
	}
}

// The default prefix, as `make cbuf-install` does it: in a private mount
// namespace (tmpfs over /usr/local, a private copy of /etc for the loader's cache) so
// the host is untouched. Before the install ran ldconfig, the client failed
// with "libcbuf.so.1: cannot open shared object file".
func TestInstallSystemPrefixRunsLdconfig(t *testing.T) {
	needInstallTools(t)
	testenv.RequireRoot(t) // mount namespace, ldconfig
	testenv.NeedTool(t, "unshare", "util-linux")
	lib, _ := filepath.Abs("../lib/cbuf")
	build := t.TempDir()
	etc := filepath.Join(t.TempDir(), "etc")
	out := buildAndRunClient(t, `set -e
cp -a /etc `+etc+`
unshare --mount --propagation private sh -ec '
mount -t tmpfs tmpfs /usr/local
mount --bind `+etc+` /etc
make -s -C `+lib+` O=`+build+` install
cc client.c $(pkg-config --cflags --libs cbuf) -o client
case "$(pkg-config --libs cbuf)" in *rpath*) echo "unexpected rpath for /usr/local"; exit 1;; esac
unset LD_LIBRARY_PATH
./client "$SOCK"'`)
	if !strings.Contains(out, "ok 4096") {
		t.Fatalf("client output: %q", out)
	}
}
