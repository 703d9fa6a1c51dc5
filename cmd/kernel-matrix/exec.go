package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cistern-ebpf/cistern/internal/vm"
)

// execMain boots one kernel and runs a shell script in it: the developer's
// loop for "does this load on 6.1".
//
//	go run ./cmd/kernel-matrix exec --kernel 6.1 [--copy BIN ...] 'script'
//
// Files given with --copy are placed in /results (the script's cwd) in the
// guest, since the guest's /tmp is its own.
func execMain(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	kname := fs.String("kernel", "6.1", "6.1, 6.12, sid (or its version, 7.2) or 5.10")
	timeout := fs.Duration("timeout", 20*time.Minute, "kill the guest after this long")
	var copies multi
	fs.Var(&copies, "copy", "file to copy into /results (repeatable)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "kernel-matrix exec: give the script as one argument")
		return 2
	}
	k, err := openByName(*kname)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := os.MkdirTemp(resultsRoot(), "exec-"+*kname+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, c := range copies {
		b, err := os.ReadFile(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(res, filepath.Base(c)), b, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r, err := k.Run(ctx, vm.Options{Script: fs.Arg(0), Results: res, Console: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "kernel-matrix: %s exit %d, boot %.1fs, total %.1fs, results in %s\n",
		k.Release, r.ExitCode, r.Boot.Seconds(), r.Elapsed.Seconds(), res)
	return r.ExitCode
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func resultsRoot() string {
	d := "/var/cache/cistern/matrix"
	os.MkdirAll(d, 0o755)
	return d
}

// openByName accepts a short name (6.1), a suite name (sid) or sid's
// version once fetched (7.2).
func openByName(name string) (*vm.Kernel, error) {
	if s, ok := vm.Lookup(name); ok {
		return vm.Open(s.Suite)
	}
	return nil, fmt.Errorf("kernel-matrix: unknown kernel %q (%s)", name, vm.Names())
}
