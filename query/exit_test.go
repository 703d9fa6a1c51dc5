package query

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

const exitHelperEnv = "CISTERN_QUERY_EXIT_HELPER"

// exitHelper runs in a child started by TestProcessExit: one thread ends
// while the process lives on (group_dead 0), then the process exits with
// status 5 (group_dead 1 for its last thread).
func exitHelper() {
	done := make(chan struct{})
	go func() {
		// A goroutine that returns while locked to its thread ends the thread.
		runtime.LockOSThread()
		close(done)
	}()
	<-done
	time.Sleep(100 * time.Millisecond)
	os.Exit(5)
}

func init() {
	if os.Getenv(exitHelperEnv) == "1" {
		exitHelper()
	}
}

// TestProcessExit: process_exit reports group_dead and exit_code on every
// kernel (the tracepoint passes group_dead since 6.18; before, the program
// derives it from the task).
func TestProcessExit(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	sql := "SELECT pid, tid, group_dead, exit_code FROM process_exit"
	res, out, _ := during(t, sql, Options{Format: "json"}, func() {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), exitHelperEnv+"=1")
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
			t.Fatalf("helper: %v", err)
		}
		pid = cmd.ProcessState.Pid()
	})
	var early, last int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]float64
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if int(m["pid"]) != pid {
			continue
		}
		if m["group_dead"] == 0 {
			early++
		} else if m["exit_code"] == 5<<8 {
			last++
		}
	}
	if early == 0 || last == 0 {
		t.Fatalf("pid %d: %d exits with group_dead 0 (want the early thread), %d with group_dead 1 and exit_code 5<<8 (want the last); %d rows:\n%s",
			pid, early, last, res.Rows, out)
	}
}
