// Package cbufsrc carries libcbuf's C sources inside the cistern binary, so
// `cistern bench cbuf` and the demo can build their C peers anywhere.
package cbufsrc

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed include/*.h src/*.c
var FS embed.FS

// Build compiles libcbuf's sources together with extra C files (name ->
// source) into dir/out using cc and the given extra flags.
func Build(dir, out string, extra map[string][]byte, flags ...string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler (cc): install gcc (scripts/deps.sh)")
	}
	if err := os.MkdirAll(filepath.Join(dir, "include"), 0o755); err != nil {
		return "", err
	}
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	args := []string{"-O2", "-g", "-Wall", "-I" + filepath.Join(dir, "include")}
	err = fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := FS.ReadFile(p)
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return err
		}
		if filepath.Ext(p) == ".c" {
			args = append(args, filepath.Join(dir, p))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	for name, src := range extra {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, src, 0o644); err != nil {
			return "", err
		}
		args = append(args, p)
	}
	bin := filepath.Join(dir, out)
	args = append(args, "-o", bin, "-lpthread")
	args = append(args, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc: %v\n%s", err, b)
	}
	return bin, nil
}
