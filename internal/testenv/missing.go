package testenv

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/servers"
)

// RequireAll is CISTERN_REQUIRE_ALL=1, which .ci/run sets: a test whose
// tool, server or data is missing then fails instead of skipping, so CI
// cannot pass by skipping. Locally the skip stays, naming what to install.
func RequireAll() bool { return os.Getenv("CISTERN_REQUIRE_ALL") == "1" }

// Missing ends a test that cannot run because what is missing (a tool, a
// server, a data file) is not on this machine; install says how to add it
// (a Debian package, "make deps"). It skips, or fails under RequireAll.
// Every such skip in the tree goes through here (TestNoHiddenSkips).
func Missing(t testing.TB, what, install string) {
	t.Helper()
	if RequireAll() {
		t.Fatalf("missing: %s (CISTERN_REQUIRE_ALL=1 makes this a failure): %s", what, install)
	}
	t.Skipf("skipped: %s is missing: %s", what, install)
}

// NeedTool returns the path of bin, or ends the test through Missing,
// naming the Debian package pkg that has it.
func NeedTool(t testing.TB, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		Missing(t, bin, "apt-get install "+pkg+" (or sudo make deps)")
	}
	return p
}

// NeedFile ends the test through Missing unless path exists.
func NeedFile(t testing.TB, path, install string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path, install)
	}
}

// NotInstalled ends the test through Missing when err says a server or
// tool is not installed (servers.ErrNotInstalled); any other err, or nil,
// returns, for the caller to handle.
func NotInstalled(t testing.TB, err error) {
	t.Helper()
	if err != nil && errors.Is(err, servers.ErrNotInstalled) {
		Missing(t, "a server or tool", err.Error())
	}
}
