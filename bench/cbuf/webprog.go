package cbufbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The web workload drives the example (examples/cbufweb) as a program, as
// its users would: built with the Go toolchain from this source tree, its
// servers started with `cbufweb serve` and their bodies checked with
// `cbufweb check`.

const examplePkg = "github.com/cistern-ebpf/cistern/examples/cbufweb"

// buildExample builds the example program into dir with `go build`, in the
// module that holds it (the working directory's or the cistern binary's
// tree: bin/cistern in a checkout), and has it build its C programs there.
func buildExample(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cbufweb-example")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, examplePkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s (go build in %s): %v\n%s", examplePkg, root, err, out)
	}
	// its C programs once, into dir: every `serve --bins dir` runs them
	if out, err := exec.CommandContext(ctx, bin, "build", "--dir", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cbufweb build: %v\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot finds the cistern module's directory above the working
// directory or above the running binary.
func moduleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for ; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
				if first, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(first) == "module github.com/cistern-ebpf/cistern" {
					return d, nil
				}
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return "", errors.New("the web workload builds examples/cbufweb with go build: run it from the cistern source tree")
}

// exampleServer is one `cbufweb serve` process and the server it runs.
type exampleServer struct {
	URL, MetricsURL, Dir string

	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	mu   sync.Mutex
	errb bytes.Buffer
	done chan struct{}
}

// startExample runs `prog serve ARGS` and waits for its started line.
func startExample(ctx context.Context, prog string, args ...string) (*exampleServer, error) {
	s := &exampleServer{done: make(chan struct{})}
	s.cmd = exec.Command(prog, append([]string{"serve"}, args...)...)
	s.cmd.Stderr = &s.errb
	in, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.in, s.out = in, bufio.NewReader(out)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	type started struct {
		line string
		err  error
	}
	ch := make(chan started, 1)
	go func() { l, err := s.out.ReadString('\n'); ch <- started{l, err} }()
	var st started
	select {
	case st = <-ch:
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("cbufweb serve %s: not started: %w", strings.Join(args, " "), ctx.Err())
	}
	var doc struct {
		URL        string `json:"url"`
		MetricsURL string `json:"metrics_url"`
		Dir        string `json:"dir"`
	}
	if st.err == nil {
		st.err = json.Unmarshal([]byte(st.line), &doc)
	}
	if st.err != nil || doc.URL == "" {
		s.Stop()
		return nil, fmt.Errorf("cbufweb serve %s: %v %q: %s", strings.Join(args, " "), st.err, st.line, strings.TrimSpace(s.errb.String()))
	}
	s.URL, s.MetricsURL, s.Dir = doc.URL, doc.MetricsURL, doc.Dir
	return s, nil
}

// CPU is the CPU time of all the server's processes so far (serve --group).
func (s *exampleServer) CPU() (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := io.WriteString(s.in, "cpu\n"); err != nil {
		return 0, fmt.Errorf("cbufweb serve: %w", err)
	}
	l, err := s.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("cbufweb serve: %v: %s", err, strings.TrimSpace(s.errb.String()))
	}
	var doc struct {
		CPU int64 `json:"cpu_ns"`
	}
	if err := json.Unmarshal([]byte(l), &doc); err != nil {
		return 0, fmt.Errorf("cbufweb serve answered %q: %w", l, err)
	}
	return time.Duration(doc.CPU), nil
}

// Stop ends the server (stdin closed: serve stops every process) and
// removes its directory.
func (s *exampleServer) Stop() {
	s.in.Close()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

// checkBody runs `prog check`: status, length, checksum and every byte.
func checkBody(ctx context.Context, prog, url string, size int, seed uint64, chunked bool) error {
	args := []string{"check", "--url", url, "--size", strconv.Itoa(size), "--seed", strconv.FormatUint(seed, 10)}
	if chunked {
		args = append(args, "--chunked")
	}
	out, err := exec.CommandContext(ctx, prog, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
