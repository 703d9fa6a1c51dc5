package main

import (
	"os/exec"
	"strings"
	"testing"
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
	}
}
