package mounts

import (
	"os"
	"path/filepath"
	"testing"
)

// Pin directories are root's only, new or already there.
func TestPinDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts: bpffs needs root")
	}
	if _, err := Ensure(BPFFS); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp(BPFFS.Path, "cistern-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	os.Chmod(root, 0o755)
	dir := filepath.Join(root, "a", "b")
	if err := PinDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "a"), dir} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", d, st.Mode().Perm())
		}
	}
}
