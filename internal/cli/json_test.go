package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteJSON: a file gets indented JSON ending in a newline; "-" is
// stdout.
func TestWriteJSON(t *testing.T) {
	v := map[string]any{"bench": "kv", "n": 7}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := WriteJSON(path, v); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || !bytes.Contains(data, []byte("\n  \"bench\": \"kv\"")) {
		t.Errorf("want indented JSON ending in a newline, got:\n%s", data)
	}

	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = wr
	err = WriteJSON("-", v)
	os.Stdout = old
	wr.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(rd)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil || m["bench"] != "kv" || m["n"] != 7.0 {
		t.Errorf("stdout JSON = %s (%v)", out, err)
	}
}
