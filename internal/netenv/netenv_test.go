package netenv

import (
	"os"
	"testing"
)

// A pair that cannot be made is an error, with nothing left behind; it was a
// nil-pointer panic in the clean-up (the doctor hit it on 6.1 and 6.12).
func TestNewPairFailureCleansUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for namespaces") // not a missing tool: run as root
	}
	p, err := NewPair("nfail", Options{Subnet: 250, MTU: 1 << 20}) // no veth takes a 1 MiB MTU
	if err == nil {
		p.Close()
		t.Fatal("NewPair with a 1 MiB MTU succeeded")
	}
	if p != nil {
		t.Fatalf("NewPair returned %v with error %v", p, err)
	}
	for _, n := range []string{"cistern-nfail-srv", "cistern-nfail-cli"} {
		if _, err := os.Stat("/var/run/netns/" + n); err == nil {
			t.Errorf("namespace %s left behind", n)
		}
	}
}
