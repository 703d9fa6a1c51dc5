package replay

import (
	"bytes"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/cistern-ebpf/cistern/evict"
)

func parse(t *testing.T, format, text string) []evict.Request {
	t.Helper()
	var got []evict.Request
	if err := Parse(strings.NewReader(text), format, func(r evict.Request) error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestParseFormats(t *testing.T) {
	h := fnv.New64a()
	h.Write([]byte("user:42"))
	for _, tc := range []struct {
		format, text string
		want         []evict.Request
	}{
		{"twitter", "# time, object, size, next_access_vtime\n0, 13053225291711363978, 737, 13\n0, 61177148907475485, 248, 6570713\n",
			[]evict.Request{{Key: 13053225291711363978, Size: 737}, {Key: 61177148907475485, Size: 248}}},
		// 1024 bytes: 2 blocks; 513 bytes: 2 blocks; 100 bytes: 1 block.
		{"cloudphysics", "version,time,op,size,lbn\n1,5633898,2a,1024,42932745\n1,5633899,28,513,7\n1,5633899,28,100,9\n",
			[]evict.Request{{Key: 42932745, Size: 512}, {Key: 42932746, Size: 512}, {Key: 7, Size: 512}, {Key: 8, Size: 512}, {Key: 9, Size: 512}}},
		{"arc", "1 1 0 0\n10  3 0 1\n\n7\t1 0 2\n",
			[]evict.Request{{Key: 1, Size: 512}, {Key: 10, Size: 512}, {Key: 11, Size: 512}, {Key: 12, Size: 512}, {Key: 7, Size: 512}}},
		{"csv", "key,size\n5,100\nuser:42,7\n", []evict.Request{{Key: 5, Size: 100}, {Key: h.Sum64(), Size: 7}}},
	} {
		if got := parse(t, tc.format, tc.text); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.format, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ format, text, want string }{
		{"nope", "", "unknown trace format"},
		{"csv", "1,2\n3\n", "line 2"},
		{"arc", "1 1 0 0\nx 1 0 0\n", "line 2"},
		{"twitter", "0, 1, 2, 3\n0, 1\n", "line 2"},
	} {
		err := Parse(strings.NewReader(tc.text), tc.format, func(evict.Request) error { return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: err %v, want %q", tc.format, tc.text, err, tc.want)
		}
	}
}

func TestReadFileZstd(t *testing.T) {
	text := "1 2 0 0\n5 1 0 1\n"
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(text))
	w.Close()
	dir := t.TempDir()
	plain, compressed := filepath.Join(dir, "t.lis"), filepath.Join(dir, "t.lis.zst")
	os.WriteFile(plain, []byte(text), 0o644)
	os.WriteFile(compressed, buf.Bytes(), 0o644)
	a, err := ReadFile(plain, "arc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadFile(compressed, "arc")
	if err != nil {
		t.Fatal(err)
	}
	want := []evict.Request{{Key: 1, Size: 512}, {Key: 2, Size: 512}, {Key: 5, Size: 512}}
	if !reflect.DeepEqual(a, want) || !reflect.DeepEqual(b, want) {
		t.Errorf("plain %v, zstd %v, want %v", a, b, want)
	}
}

// TestBundledTraces reads the shipped traces and checks their request counts
// against /work/shared/data/traces/README.md.
func TestBundledTraces(t *testing.T) {
	for _, tc := range []struct {
		file, format string
		lines        int
	}{
		{"twitter_cluster52_1m.csv.zst", "twitter", 1000000},
		{"arc_oltp.lis.zst", "arc", 914145},
	} {
		reqs := bundled(t, tc.file, tc.format)
		if len(reqs) != tc.lines {
			t.Errorf("%s: %d requests, want %d", tc.file, len(reqs), tc.lines)
		}
	}
}
