package pagecachebench

import (
	"bufio"
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestFioZipfProbsMatchFio draws 3.1 million offsets from fio itself
// (ioengine null, the bench's zipf:1.1 over 1 GiB, write_iolog) and checks
// the mass of its hottest blocks against fioZipfProbs': the model the zipf
// part's A0 figure rests on.
func TestFioZipfProbsMatchFio(t *testing.T) {
	testenv.NeedTool(t, "fio", "fio")
	dir := t.TempDir()
	log := filepath.Join(dir, "iolog")
	out, err := exec.Command("fio", "--name=z", "--ioengine=null", "--rw=randread", "--bs=4k", "--size=1g", "--io_size=12g",
		"--random_distribution=zipf:"+zipfTheta, "--filename="+filepath.Join(dir, "z"), "--write_iolog="+log, "--output-format=terse").CombinedOutput()
	if err != nil {
		t.Fatalf("fio: %v: %s", err, out)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "<time> <file> read <offset> <length>"
		if fs := strings.Fields(sc.Text()); len(fs) == 5 && fs[2] == "read" {
			counts[fs[3]]++
			total++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if total < 3_000_000 {
		t.Fatalf("fio logged %d reads, want 3,145,728", total)
	}
	emp := make([]float64, 0, len(counts))
	for _, c := range counts {
		emp = append(emp, float64(c)/float64(total))
	}
	model := fioZipfProbs(1<<18, 1.1)
	var sum float64
	for _, v := range model {
		sum += v
	}
	if sum < 0.999999 || sum > 1.000001 {
		t.Fatalf("model masses sum to %v", sum)
	}
	desc := func(a, b float64) int { return cmp.Compare(b, a) }
	slices.SortFunc(emp, desc)
	slices.SortFunc(model, desc)
	var e, m float64
	for k := 0; k < 1000; k++ {
		e += emp[k]
		m += model[k]
		if k == 0 || k == 9 || k == 99 || k == 999 {
			t.Logf("hottest %d blocks: fio %.4f, model %.4f", k+1, e, m)
			if d := e - m; d > 0.003 || d < -0.003 {
				t.Errorf("hottest %d blocks: fio drew %.4f of its reads there, the model %.4f", k+1, e, m)
			}
		}
	}
}
