// Package docs holds the design notes; its test keeps the README's map of
// the tree true.
package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/kernel"
)

// readme is the repository's README.md, read from docs/.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// layoutBlock is the code block under "## Layout".
func layoutBlock(t *testing.T, s string) string {
	t.Helper()
	i := strings.Index(s, "## Layout\n")
	if i < 0 {
		t.Fatal("README.md has no ## Layout section")
	}
	s = s[i:]
	start := strings.Index(s, "```\n")
	end := strings.Index(s[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("the Layout section has no code block")
	}
	return s[start+4 : start+4+end]
}

// ignoredDirs are the top-level directories .gitignore names ("/bin/"):
// build output, not part of the tree.
func ignoredDirs(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	f, err := os.Open("../.gitignore")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "/") && strings.HasSuffix(l, "/") && strings.Count(l, "/") == 2 {
			out[strings.Trim(l, "/")] = true
		}
	}
	return out
}

// TestLayoutNamesEveryDirectory: every top-level directory of the tree has
// a line in the README's Layout map, and every path the map starts a line
// with exists.
func TestLayoutNamesEveryDirectory(t *testing.T) {
	block := layoutBlock(t, readme(t))
	var paths []string
	for _, l := range strings.Split(block, "\n") {
		if l == "" || l[0] == ' ' {
			continue // a continuation line
		}
		paths = append(paths, strings.Fields(l)[0])
	}
	listed := map[string]bool{}
	for _, p := range paths {
		listed[strings.SplitN(strings.TrimSuffix(p, "/"), "/", 2)[0]] = true
		if strings.Contains(p, "<") {
			continue // a pattern: bpf/<system>/
		}
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("the Layout map names %s, which is not in the tree", p)
		}
	}
	ents, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	ignored := ignoredDirs(t)
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || strings.HasPrefix(n, ".") || ignored[n] {
			continue
		}
		if !listed[n] {
			t.Errorf("top-level directory %s/ is missing from the README's Layout map", n)
		}
	}
}

var numbers = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}

// TestSystemsCount: the README's systems section counts and names the
// systems kernel.Systems() judges.
func TestSystemsCount(t *testing.T) {
	s := readme(t)
	m := regexp.MustCompile(`(?m)^## The (\w+) systems$`).FindStringSubmatchIndex(s)
	if m == nil {
		t.Fatal(`README.md has no "## The N systems" section`)
	}
	systems := kernel.SystemsFor(func(string) error { return nil }) // the names, without probing
	if n := len(systems); n >= len(numbers) || s[m[2]:m[3]] != numbers[n] {
		t.Errorf("README.md says %q systems, kernel.Systems() has %d", s[m[2]:m[3]], len(systems))
	}
	section := s[m[1]:]
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	for _, sys := range systems {
		if !strings.Contains(section, "`"+sys.Name+"`") {
			t.Errorf("the systems section does not name `%s`", sys.Name)
		}
	}
}

// TestNoSourceIncludesAnotherSource: BPF code is shared through headers
// (bpf/include/cistern, a system's own *.bpf.h), never by one .c file
// including another's: a policy is a header its stubs include.
func TestNoSourceIncludesAnotherSource(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\s*#\s*include\s+["<]([^">]+\.c)[">]`)
	err := filepath.WalkDir("../bpf", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".c") || strings.HasSuffix(p, ".h")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			t.Errorf("%s includes %s: share it as a header", strings.TrimPrefix(p, "../"), m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
