package accum

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestPumpOrderAndBackPressure: records pass through the pump's queue in
// order and whole, on several connections, with a queue bound small enough
// that the pump has to wait for the consumer, and the queue's blocks are
// reused (the payload, 2.4 MB, is 19 times the bound and fills several
// blocks; the ring holds it all, so a slow pump would not lose any).
func TestPumpOrderAndBackPressure(t *testing.T) {
	d := open(t, Config{FlushSize: 1024, Latency: time.Second, RingSize: 8 << 20})
	d.Reader.Pump(PumpOptions{QueueBytes: 128 << 10})
	if !d.Reader.PumpNiced() {
		t.Error("pump thread not at its raised priority (root has CAP_SYS_NICE)")
	}
	var want [3][]byte
	errc := make(chan error, 1)
	go func() {
		seed := 0
		for i := 0; i < 96; i++ {
			conn := uint64(i%3 + 1)
			frag := make([]byte, 20000+i*100)
			for j := range frag {
				seed++
				frag[j] = byte(seed*13 + seed>>9)
			}
			if err := d.Write(conn, 1, 2, Write, 1, frag); err != nil {
				errc <- err
				return
			}
			want[conn-1] = append(want[conn-1], frag...)
			if i%8 == 7 {
				time.Sleep(2 * time.Millisecond)
			}
		}
		for c := uint64(1); c <= 3; c++ {
			if err := d.Close(c); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	closed := 0
	for closed < 3 {
		// The consumer is slow at first: the queue fills to its bound.
		if d.Reader.Bytes == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		rec, err := d.Reader.Read(5 * time.Second)
		if err != nil {
			select {
			case werr := <-errc:
				t.Fatalf("read: %v; write: %v", err, werr)
			default:
			}
			t.Fatalf("read: %v", err)
		}
		if rec.Flags&FlagClose != 0 {
			closed++
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for c := uint64(1); c <= 3; c++ {
		s := d.Reader.Streams.Streams[c]
		if s == nil || !bytes.Equal(s.Data[Write], want[c-1]) {
			t.Fatalf("connection %d: stream differs from what was written", c)
		}
	}
	noLoss(t, d)
	if _, err := d.Reader.Read(20 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("empty queue: %v", err)
	}
	// About 2.4 MB went through 1 MiB blocks: with at most 128 KiB queued,
	// no more than two blocks are ever needed at once, whether the consumer
	// lagged (a block is recycled when its last record is read) or kept up
	// (recycled when the next block is needed).
	if p := d.Reader.pump; p.blocks < 3 || p.allocs > 2 || len(p.blkUsed) > 1 {
		t.Errorf("queue blocks not recycled: %d blocks filled, %d allocated, %d free, %d still in use", p.blocks, p.allocs, len(p.free), len(p.blkUsed))
	}
}

// TestPumpWokenWithoutPolling: a record written without a wakeup (a full
// batch, well under accum_wakeup_bytes) reaches a pump asleep in its wait:
// the latency timer wakes it (late_wakeups), not the pump's backstop poll
// (pumpPoll, a second), which an idle agent no longer pays every 20 ms.
func TestPumpWokenWithoutPolling(t *testing.T) {
	lat := 20 * time.Millisecond
	d := open(t, Config{FlushSize: 1024, Latency: lat})
	d.Reader.Pump(PumpOptions{})
	bound := 10 * lat * testenv.TimeScale()
	for i := range 3 {
		time.Sleep(2 * lat)                                 // the pump is waiting again
		frag := bytes.Repeat([]byte{byte('a' + i)}, 1024-4) // fills the batch: flushed at once
		start := time.Now()
		if err := d.Write(uint64(i+1), 1, 1, Write, 0, frag); err != nil {
			t.Fatal(err)
		}
		rec, err := d.Reader.Read(bound)
		if err != nil {
			t.Fatalf("record %d not delivered within %v: %v", i, bound, err)
		}
		if rec.Flags&FlagTimer != 0 || len(rec.Segments) != 1 || !bytes.Equal(rec.Segments[0].Data, frag) {
			t.Fatalf("record %d: flags %#x, %d segments", i, rec.Flags, len(rec.Segments))
		}
		t.Logf("record %d after %v", i, time.Since(start))
	}
	st := noLoss(t, d)
	if st.LateWakeups == 0 {
		t.Fatalf("records delivered, but the timer sent no late wakeup: %+v", st)
	}
}
