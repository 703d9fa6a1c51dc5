package cbufbench

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	cbufsrc "github.com/cistern-ebpf/cistern/lib/cbuf"
)

//go:embed peer/cbufbench.c iox2/Cargo.toml iox2/Cargo.lock iox2/src/main.rs
var cbufBenchFS embed.FS

// cbufCacheDir holds what the CBUF bench builds: the C peers and the
// iceoryx2 peer (cargo's target dir, so later runs reuse the build).
func cbufCacheDir() string {
	if d := os.Getenv("CISTERN_CACHE"); d != "" {
		return filepath.Join(d, "cbuf")
	}
	return "/var/cache/cistern/cbuf"
}

// buildCBufPeers compiles cbufbench against libcbuf, and a second copy
// linked with jemalloc when Debian's libjemalloc is installed ("" if not).
func buildCBufPeers(dir string) (glibc, jemalloc string, err error) {
	src, _ := cbufBenchFS.ReadFile("peer/cbufbench.c")
	extra := map[string][]byte{"cbufbench.c": src}
	if glibc, err = cbufsrc.Build(filepath.Join(dir, "c"), "cbufbench", extra); err != nil {
		return "", "", err
	}
	if _, e := os.Stat("/usr/lib/x86_64-linux-gnu/libjemalloc.so"); e == nil {
		jemalloc, _ = cbufsrc.Build(filepath.Join(dir, "c-jemalloc"), "cbufbench", extra, "-ljemalloc")
	}
	return glibc, jemalloc, nil
}

// buildIox2 builds the iceoryx2 round-trip peer with cargo (crates.io);
// the first build takes minutes, later ones reuse the target dir.
func buildIox2(ctx context.Context, dir string, progress func(string)) (string, error) {
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		if home, e := os.UserHomeDir(); e == nil {
			if _, e := os.Stat(filepath.Join(home, ".cargo/bin/cargo")); e == nil {
				cargo = filepath.Join(home, ".cargo/bin/cargo")
			}
		}
	}
	if cargo == "" {
		return "", fmt.Errorf("cargo not found: install Rust (rustup) to compare with iceoryx2")
	}
	proj := filepath.Join(dir, "iox2")
	err = fs.WalkDir(cbufBenchFS, "iox2", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("iox2", p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(proj, rel), 0o755)
		}
		b, _ := cbufBenchFS.ReadFile(p)
		dst := filepath.Join(proj, rel)
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
			return nil // keep the mtime: cargo then reuses its build
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "iox2-target", "release", "cbuf-iox2-rtt")
	progress("building the iceoryx2 peer with cargo (minutes the first time)")
	cmd := exec.CommandContext(ctx, cargo, "build", "--release", "--quiet", "--target-dir", filepath.Join(dir, "iox2-target"))
	cmd.Dir = proj
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cargo build of the iceoryx2 peer: %v\n%s", err, out)
	}
	return bin, nil
}
