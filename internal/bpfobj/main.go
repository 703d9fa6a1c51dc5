// Command bpfobj compiles BPF C sources into objects for //go:embed, as
// bpf2go does (its compiler driver, the same flags) but without the Go
// bindings: packages that look programs and maps up by name embed the
// object and load it with ebpf.LoadCollectionSpecFromReader. Each source
// dir/<stem>.bpf.c becomes <stem>_bpfel.o in the working directory (the
// package's). Arguments may be globs, so a new source in a globbed
// directory is built without editing any go:generate line:
//
//	//go:generate go run ../internal/bpfobj -I ../bpf/include ../bpf/evict/*.bpf.c
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf/cmd/bpf2go/gen"
)

func main() {
	include := flag.String("I", "", "include directory (cistern's headers)")
	cc := flag.String("cc", "clang-19", "C compiler")
	flag.Parse()
	if err := run(*cc, *include, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "bpfobj:", err)
		os.Exit(1)
	}
}

// sources expands the globs of args (relative to dir) into .bpf.c files,
// sorted (bpfcheck.Uncovered expands a go:generate line's the same way).
func sources(dir string, args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if !strings.HasSuffix(a, ".bpf.c") {
			return nil, fmt.Errorf("%s: want a .bpf.c source or glob", a)
		}
		m, err := filepath.Glob(filepath.Join(dir, a))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s matches no source", a)
		}
		out = append(out, m...)
	}
	sort.Strings(out)
	return out, nil
}

func run(cc, include string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no sources")
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	srcs, err := sources(wd, args)
	if err != nil {
		return err
	}
	target, _, err := gen.FindTarget("bpfel")
	if err != nil {
		return err
	}
	flags := []string{"-O2", "-g", "-Wall", "-mcpu=v3"}
	if include != "" {
		flags = append(flags, "-I"+include)
	}
	seen := map[string]string{}
	for _, src := range srcs {
		stem := strings.TrimSuffix(filepath.Base(src), ".bpf.c")
		if other, ok := seen[stem]; ok {
			return fmt.Errorf("%s and %s would both be %s_bpfel.o", other, src, stem)
		}
		seen[stem] = src
		err := gen.Compile(gen.CompileArgs{
			CC: cc, Strip: strings.Replace(cc, "clang", "llvm-strip", 1),
			Flags: flags, Target: target, Workdir: wd,
			Source: src, Dest: filepath.Join(wd, stem+"_bpfel.o"),
		})
		if err != nil {
			return fmt.Errorf("compile %s: %w", src, err)
		}
	}
	return nil
}
