package pagecache

import (
	"testing"

	"github.com/cistern-ebpf/cistern/internal/bpfcheck"
)

// TestFileKeyLayout: fileKey is struct pc_file_key, the key of the
// tracker's pc_files map.
func TestFileKeyLayout(t *testing.T) {
	spec, err := loadTrack()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["pc_files"]
	if m == nil || m.Key == nil {
		t.Fatal("the policy object has no pc_files map with a BTF key")
	}
	if err := bpfcheck.Layout(m.Key, fileKey{}); err != nil {
		t.Error(err)
	}
}
