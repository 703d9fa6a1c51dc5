// Package bpfcheck loads BPF objects through the running kernel's verifier.
// The test suite uses it to load every program in the tree.
package bpfcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/kernel"
)

// Objects lists the bpf2go objects (*_bpfel.o) below root.
func Objects(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_bpfel.o") {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

var (
	generateRe = regexp.MustCompile(`(?m)^//go:generate .*bpf2go .*?(\S+\.bpf\.c)`)
	// internal/bpfobj's lines name sources and globs of them.
	bpfobjRe = regexp.MustCompile(`(?m)^//go:generate go run \S*internal/bpfobj( .*)$`)
)

// Uncovered lists BPF sources below root/bpf (outside testdata) that no
// go:generate line builds, so none of them escapes the load test.
func Uncovered(root string) ([]string, error) {
	built := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range generateRe.FindAllStringSubmatch(string(data), -1) {
			built[filepath.Clean(filepath.Join(filepath.Dir(p), m[1]))] = true
		}
		for _, m := range bpfobjRe.FindAllStringSubmatch(string(data), -1) {
			for _, arg := range strings.Fields(m[1]) {
				if !strings.HasSuffix(arg, ".bpf.c") {
					continue
				}
				srcs, err := filepath.Glob(filepath.Join(filepath.Dir(p), arg))
				if err != nil {
					return err
				}
				for _, src := range srcs {
					built[filepath.Clean(src)] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var missing []string
	err = filepath.WalkDir(filepath.Join(root, "bpf"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".bpf.c") && !built[filepath.Clean(p)] {
			missing = append(missing, p)
		}
		return nil
	})
	return missing, err
}

// Load loads every map and program of the object at path, then frees them.
// A verifier refusal comes back as an error whose text starts with the
// program name and the verifier's reason; the full log is in the
// *ebpf.VerifierError it wraps. struct_ops maps meant for a link are
// loaded in the form the kernel accepts (kernel.AdaptStructOps), and
// unregistered again.
func Load(path string) (programs int, err error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return 0, fmt.Errorf("%s: parse: %w", path, err)
	}
	legacy := kernel.AdaptStructOps(spec)
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{LogSizeStart: 1 << 20},
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer coll.Close()
	for _, name := range legacy {
		if err := kernel.UnregisterStructOps(coll.Maps[name]); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	return len(coll.Programs), nil
}

// IsVerifierError tells whether err is the verifier refusing a program.
func IsVerifierError(err error) bool {
	var ve *ebpf.VerifierError
	return errors.As(err, &ve)
}

// ModuleRoot finds the directory holding go.mod, starting at dir.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("go.mod not found")
		}
	}
}
