package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCreatePrivate: captured data lands in files only their owner reads,
// whatever the umask, an existing file's mode, or a link another user
// planted.
func TestCreatePrivate(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0) // the loosest umask: the mode must not come from it
	defer syscall.Umask(old)

	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	write := func(p, s string) error {
		f, err := CreatePrivate(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(s)
		return err
	}

	fresh := filepath.Join(dir, "fresh.json")
	if err := write(fresh, "new"); err != nil {
		t.Fatal(err)
	}
	if m := mode(fresh); m != 0o600 {
		t.Errorf("new file: mode %v, want 0600", m)
	}

	wide := filepath.Join(dir, "wide.json")
	if err := os.WriteFile(wide, []byte("old contents, longer than the new"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := write(wide, "new"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(wide); string(b) != "new" || mode(wide) != 0o600 {
		t.Errorf("existing 0666 file: %q mode %v, want \"new\" 0600", b, mode(wide))
	}

	if err := write(os.DevNull, "x"); err != nil {
		t.Errorf("%s: %v", os.DevNull, err)
	}
	if fi, _ := os.Stat(os.DevNull); fi.Mode().Perm() != 0o666 {
		t.Errorf("%s changed mode: %v", os.DevNull, fi.Mode())
	}

	if os.Geteuid() != 0 {
		t.Skip("skipped the other-user cases (internal/cli): chown needs root; run sudo make test") // not a missing tool: root
	}
	const nobody = 65534
	theirs := filepath.Join(dir, "theirs.json")
	if err := os.WriteFile(theirs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := write(theirs, "secret"); err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("a file of uid %d: %v, want refused", nobody, err)
	}
	if b, _ := os.ReadFile(theirs); len(b) != 0 {
		t.Errorf("the refused file holds %q", b)
	}

	target := filepath.Join(dir, "target.json")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := write(link, "secret"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symbolic link of uid %d: %v, want refused", nobody, err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the link's target was created")
	}
	// Our own link is followed; the file it makes is private too.
	if err := os.Lchown(link, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := write(link, "ok"); err != nil || mode(target) != 0o600 {
		t.Errorf("our own link: %v, target mode %v", err, mode(target))
	}
}
