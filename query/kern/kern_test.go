package kern

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestMVSFLoadsEveryTable(t *testing.T) {
	testenv.RequireRoot(t)
	libc, err := filepath.Glob("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil || len(libc) == 0 {
		t.Fatal("no libc.so.6 for the uprobe table")
	}
	for name := range objects {
		for _, emit := range []int{EmitNone, EmitFull} {
			p, err := Load(Config{Object: name, Emit: emit, NeedComm: true, NeedCgroup: true, Binary: libc[0], Symbol: "getpid"})
			if err != nil {
				var ve *ebpf.VerifierError
				if errors.As(err, &ve) {
					t.Fatalf("%s: %+v", name, ve)
				}
				t.Fatalf("%s: %v", name, err)
			}
			time.Sleep(10 * time.Millisecond)
			p.Close()
		}
	}
}
