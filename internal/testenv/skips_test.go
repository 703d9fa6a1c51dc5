package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	skipCall = regexp.MustCompile(`\.(Skip|Skipf|SkipNow)\(`)
	// Words of a skip that is about something to install.
	toolWords = regexp.MustCompile(`(?i)install|make deps|on PATH|not present|missing|no C compiler|toolchain`)
)

const notATool = "// not a missing tool:"

// TestNoHiddenSkips: every skip in the tree for a missing tool, server or
// data file goes through Missing (NeedTool, NeedFile, NotInstalled), which
// fails under CISTERN_REQUIRE_ALL=1 (CI). Any other t.Skip must say on its
// line why it is not one ("// not a missing tool: a kernel before 6.5"),
// and its message must not read like one.
func TestNoHiddenSkips(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "target", "build", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if !strings.HasSuffix(p, ".go") || rel == "internal/testenv/missing.go" || rel == "internal/testenv/skips_test.go" {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if !skipCall.MatchString(line) || strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			seen++
			code, why, annotated := strings.Cut(line, notATool)
			switch {
			case !annotated:
				t.Errorf("%s:%d: a skip outside testenv.Missing: use testenv.NeedTool/NeedFile/NotInstalled/Missing, "+
					"or say on the line why it is not a missing tool (%s ...):\n\t%s", rel, n, notATool, strings.TrimSpace(line))
			case strings.TrimSpace(why) == "":
				t.Errorf("%s:%d: %s with no reason", rel, n, notATool)
			case toolWords.MatchString(code):
				t.Errorf("%s:%d: this skip reads like a missing tool: use testenv.Missing:\n\t%s", rel, n, strings.TrimSpace(line))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 { // the walk must have found the tree's skips
		t.Fatalf("found %d skips under %s: the walk missed the tree", seen, root)
	}
	t.Logf("%d skips outside testenv.Missing, each saying why it is not a missing tool", seen)
}

// TestMissingFailsUnderRequireAll runs NeedTool for a tool no machine has,
// in a child of this test binary, with and without CISTERN_REQUIRE_ALL=1.
func TestMissingFailsUnderRequireAll(t *testing.T) {
	if os.Getenv("CISTERN_MISSING_CHILD") == "1" {
		NeedTool(t, "cistern-no-such-tool", "cistern-no-such-package")
		t.Fatal("NeedTool returned for a missing tool")
	}
	for _, c := range []struct {
		requireAll string
		wantFail   bool
		want       string
	}{
		{"", false, "--- SKIP"},
		{"1", true, "CISTERN_REQUIRE_ALL=1 makes this a failure"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingFailsUnderRequireAll$", "-test.v")
		cmd.Env = append(os.Environ(), "CISTERN_MISSING_CHILD=1", "CISTERN_REQUIRE_ALL="+c.requireAll)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.wantFail || !strings.Contains(string(out), c.want) ||
			!strings.Contains(string(out), "apt-get install cistern-no-such-package") {
			t.Errorf("CISTERN_REQUIRE_ALL=%q: err %v, want failure %v and %q naming the package:\n%s", c.requireAll, err, c.wantFail, c.want, out)
		}
	}
}
