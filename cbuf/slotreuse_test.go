package cbuf

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// reuseSender connects, sends one filled buffer of size bytes with nonce
// to the receiver (send) and leaves; it returns its slot once the manager
// has freed that slot.
func reuseSender(t *testing.T, m *Manager, sock string, size int, nonce uint64, send func(ID)) uint32 {
	t.Helper()
	c, err := Connect(sock)
	if err != nil {
		t.Fatal(err)
	}
	b, id, err := c.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	fill(b, nonce)
	c.Send(id)
	c.Free(id)
	send(id)
	slot := c.Slot()
	c.Close()
	waitFor(t, fmt.Sprintf("slot %d freed", slot), 5*time.Second, func() bool {
		for _, cs := range m.Stats().Components {
			if cs.Slot == slot {
				return false
			}
		}
		return true
	})
	return slot
}

// A component leaves, a new one gets its slot: a receiver that had mapped
// the old component's pool reads the new component's buffers, not the old
// pool (Go receiver).
func TestSlotReuseRemapsPool(t *testing.T) {
	m, sock := startManager(t, ManagerOptions{})
	recv, err := Connect(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	const size = 3 * PageSize
	take := func(nonce uint64) func(ID) {
		return func(id ID) {
			b, err := recv.Buf(id, size)
			if err != nil {
				t.Fatalf("Buf(%v): %v", id, err)
			}
			if !check(b, nonce) {
				t.Fatalf("buffer %v holds other bytes than its sender wrote (nonce %x): the receiver read a stale pool", id, nonce)
			}
			recv.Free(id)
		}
	}
	s1 := reuseSender(t, m, sock, size, 0x1111, take(0x1111))
	s2 := reuseSender(t, m, sock, size, 0x2222, take(0x2222))
	if s1 != s2 {
		t.Fatalf("the second sender got slot %d, not the freed slot %d: the test does not exercise reuse", s2, s1)
	}
	s3 := reuseSender(t, m, sock, size, 0x3333, take(0x3333))
	if s3 != s1 {
		t.Fatalf("third sender slot %d, want %d", s3, s1)
	}
}

// The same with the C library as the receiver.
func TestSlotReuseMapsTheNewPool(t *testing.T) {
	peer := buildPeer(t)
	m, sock := startManager(t, ManagerOptions{})
	const size = 2 * PageSize
	cmd := exec.Command(peer, sock, "recv", fmt.Sprint(size))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "the C receiver connected", 5*time.Second, func() bool { return len(m.Stats().Components) == 1 })
	var slots []uint32
	for i, nonce := range []uint64{0xaaaa, 0xbbbb, 0xcccc} {
		// the receiver must have taken the buffer before its sender leaves,
		// else the slot stays held: wait for its receive count
		want := uint64(i + 1)
		slots = append(slots, reuseSender(t, m, sock, size, nonce, func(id ID) {
			fmt.Fprintf(stdin, "%d %d\n", uint64(id), nonce)
			waitFor(t, "the C receiver took the buffer", 5*time.Second, func() bool {
				for _, cs := range m.Stats().Components {
					if cs.Name != "" && cs.Recvs >= want && strings.HasPrefix(cs.Name, "pid") && cs.Pid == int32(cmd.Process.Pid) {
						return true
					}
				}
				return false
			})
		}))
	}
	stdin.Close()
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Wait()
	if strings.TrimSpace(line) != "ok 3 bad 0" {
		t.Fatalf("C receiver: %q, want \"ok 3 bad 0\" (slots %v)", line, slots)
	}
	if slots[0] != slots[1] || slots[1] != slots[2] {
		t.Fatalf("senders got slots %v: the test does not exercise reuse", slots)
	}
}
