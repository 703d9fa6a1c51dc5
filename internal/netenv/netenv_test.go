package netenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
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

// A pair's name is held by one process at a time: another process holding
// it makes NewPair wait (not delete its namespaces), and a second pair of
// the same name in this process is refused (flock would never return).
func TestNewPairNameIsLocked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for namespaces") // not a missing tool: run as root
	}
	lock, err := lockName("nlock") // the path NewPair uses
	if err != nil {
		t.Fatal(err)
	}
	path := lock.Name()
	lock.Close()
	heldMu.Lock()
	delete(held, "nlock")
	heldMu.Unlock()
	// util-linux's flock, another process, holds the name for a second.
	other := exec.Command("flock", path, "sleep", "1")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Wait()
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	p, err := NewPair("nlock", Options{Subnet: 251})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if w := time.Since(t0); w < 500*time.Millisecond {
		t.Errorf("NewPair took %v while another process held the name for 1 s", w)
	}
	if q, err := NewPair("nlock", Options{Subnet: 252}); err == nil {
		q.Close()
		t.Fatal("a second pair of the same name in one process was made")
	}
	if _, err := os.Stat("/var/run/netns/" + p.ServerNSName()); err != nil {
		t.Errorf("the refused second pair removed the first's namespace: %v", err)
	}
}
