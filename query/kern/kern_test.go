package kern

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

func TestMVSFLoadsEveryTable(t *testing.T) {
	testenv.RequireRoot(t)
	for name := range objects {
		if name == "uprobe" {
			continue
		}
		for _, emit := range []int{EmitNone, EmitFull} {
			p, err := Load(Config{Object: name, Emit: emit, NeedComm: true, NeedCgroup: true})
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
