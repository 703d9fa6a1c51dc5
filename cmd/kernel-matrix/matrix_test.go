package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// The guest's script must parse, in both runs, and retry a failed step once.
func TestGuestScriptParses(t *testing.T) {
	for _, full := range []bool{false, true} {
		sc := guestScript("/repo", full, map[string]string{"lru/10000": "0.5"})
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(sc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("full=%v: sh -n: %v %s\n%s", full, err, out, sc)
		}
		if !strings.Contains(sc, "retrying once") || !strings.Contains(sc, "/results/pool.rc") {
			t.Fatalf("full=%v: script lacks the retry or a step:\n%s", full, sc)
		}
		// The attach tests run with their servers in the fast matrix; with
		// FULL=1 the capture step runs them.
		attach := strings.Contains(sc, "CISTERN_SKIP_SERVERS=0 /results/bin/capture.test") && strings.Contains(sc, "/results/capture-attach.rc")
		if attach == full || !strings.Contains(sc, "CISTERN_PGCLIENT_DIR=/results/bin/pgclient") {
			t.Errorf("full=%v: capture-attach step with its servers %v, want %v; or no CISTERN_PGCLIENT_DIR", full, attach, !full)
		}
	}
}

// The guest's "unavailable" shell function reads the doctor's systems: on
// 5.10 (a real doctor.json from that kernel) kv and capture are out, cbuf
// and query are in, and steps without a system are never "unavailable".
func TestGuestUnavailable(t *testing.T) {
	sh := testenv.NeedTool(t, "busybox", "busybox-static") // the guest's shell
	var fn string
	for _, l := range strings.Split(guestScript("/x", true, nil), "\n") {
		if strings.HasPrefix(l, "unavailable()") {
			fn = strings.ReplaceAll(l, "/results/doctor.json", "testdata/doctor-5.10.json")
		}
	}
	if fn == "" {
		t.Fatal("no unavailable() in the guest script")
	}
	for sys, want := range map[string]bool{"pool": true, "kv": true, "accum": true, "capture": true, "evict": true, "pagecache": true, "cbuf": false, "query": false, "-": false} {
		err := exec.Command(sh, "sh", "-c", fn+"\nunavailable "+sys).Run()
		if got := err == nil; got != want {
			t.Errorf("unavailable %s = %v, want %v", sys, got, want)
		}
	}
}
