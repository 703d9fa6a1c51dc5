package accum

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The pump: a goroutine on its own OS thread, at a raised priority, that
// moves ring records into a queue in user memory as soon as they arrive;
// Read then takes them from the queue. Without it the ring is drained only
// while the consumer is in Read: a consumer that parses, writes its output
// or rescans the processes leaves the ring filling meanwhile, and on a
// loaded machine the reader waits behind the very processes it traces
// (the churn benchmark lost 40% of 67 MB so). The ring has to absorb only
// the pump's wake-up latency; the queue (bounded by QueueBytes) absorbs the
// consumer's pace.

// PumpOptions configure Reader.Pump.
type PumpOptions struct {
	// Nice is the pump thread's nice value (default DefaultPumpNice); the
	// raise needs CAP_SYS_NICE and is skipped without it (Reader.PumpNiced
	// says whether it took).
	Nice int
	// QueueBytes bounds the records queued for Read (default
	// DefaultQueueBytes): beyond it the pump waits, the ring fills and the
	// kernel counts the loss.
	QueueBytes int
}

// Defaults of PumpOptions.
const (
	DefaultPumpNice   = -10
	DefaultQueueBytes = 256 << 20
	pumpBlock         = 1 << 20 // queue memory comes in blocks of this size
	// pumpPoll only backs the kernel's wakeups up: the latency timer wakes
	// the reader for every record written without a wakeup (accum.bpf.h,
	// WAKEUPS), so an idle pump sleeps. It polled every 20 ms before, which
	// with the Go runtime's own wakeups around each (sysmon) was most of an
	// idle agent's CPU (issue #34).
	pumpPoll = time.Second
)

// pumpRec is a record in a queue block.
type pumpRec struct {
	blk  *[]byte
	data []byte
}

type pump struct {
	mu     sync.Mutex
	q      []pumpRec
	head   int
	bytes  int
	limit  int
	free   []*[]byte
	cur    *[]byte // block being filled
	held   *[]byte // block of the record Read returned last
	notify chan struct{}
	space  chan struct{}
	// ringFile is the ring's fd in the runtime's poller: the pump waits
	// there, holding no P in a blocking syscall (see run).
	ringFile *os.File
	ringConn syscall.RawConn
	stop     chan struct{}
	done     chan struct{}
	err      error
	niced    atomic.Bool
	blkUsed  map[*[]byte]int // records of each block not yet consumed
	blocks   int             // blocks made current, and how many of them
	allocs   int             // were new allocations (the rest were recycled)
}

// Pump starts draining the ring into a queue (see PumpOptions). Call it
// once, before the first Read.
func (r *Reader) Pump(opt PumpOptions) {
	if opt.Nice == 0 {
		opt.Nice = DefaultPumpNice
	}
	if opt.QueueBytes == 0 {
		opt.QueueBytes = DefaultQueueBytes
	}
	p := &pump{limit: opt.QueueBytes, notify: make(chan struct{}, 1), space: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), blkUsed: map[*[]byte]int{}}
	fd, err := unix.FcntlInt(uintptr(r.ring.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err == nil {
		p.ringFile = os.NewFile(uintptr(fd), "accum ring")
		p.ringConn, err = p.ringFile.SyscallConn()
	}
	if err != nil {
		p.err = fmt.Errorf("accum pump: ring fd: %w", err)
	}
	r.pump = p
	started := make(chan struct{})
	go func() {
		defer close(p.done)
		// The thread stays locked (and is discarded at the end): its
		// priority never passes to other goroutines or to the children
		// they start, and the runtime clones new threads from its
		// template thread, not from a locked one.
		runtime.LockOSThread()
		if unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), opt.Nice) == nil {
			p.niced.Store(true)
		}
		close(started)
		p.run(r)
	}()
	<-started
}

// PumpNiced tells whether the pump runs at its raised priority.
func (r *Reader) PumpNiced() bool { return r.pump != nil && r.pump.niced.Load() }

func (p *pump) run(r *Reader) {
	if p.err != nil {
		p.signal()
		return
	}
	var raw = r.raw
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		// Take what the ring holds without waiting; wait for more in the
		// runtime's poller, not in a blocking epoll_wait: a thread blocked
		// in a syscall holds its P, and the runtime's monitor (sysmon),
		// retaking it, wakes every 20 us while the pump sleeps and wakes,
		// which cost as much CPU as the pump's own work.
		r.rb.SetDeadline(time.Now())
		err := r.rb.ReadInto(&raw)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline is a backstop (pumpPoll); Close interrupts it.
			p.ringFile.SetReadDeadline(time.Now().Add(pumpPoll))
			err = p.ringConn.Read(func(uintptr) bool { return r.rb.AvailableBytes() > 0 })
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				select {
				case <-p.stop:
					return
				default:
				}
			} else {
				continue
			}
		}
		if err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			p.signal()
			return
		}
		n := len(raw.RawSample)
		for {
			p.mu.Lock()
			if p.bytes+n <= p.limit || p.bytes == 0 {
				break
			}
			p.mu.Unlock()
			select { // the consumer is behind: wait for room
			case <-p.space:
			case <-p.stop:
				return
			}
		}
		p.push(raw.RawSample)
		first := p.bytes == n
		p.mu.Unlock()
		// Wake the consumer when it may be waiting (the queue was empty)
		// and at the end of a burst: not once per record.
		if first || r.rb.AvailableBytes() == 0 {
			p.signal()
		}
	}
}

func (p *pump) signal() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// push copies b into the current block (a new one when it is full); mu held.
func (p *pump) push(b []byte) {
	n := len(b)
	if p.cur == nil || len(*p.cur)+n > cap(*p.cur) {
		// A block whose records were all consumed while it was still being
		// filled was skipped by release (it was current): recycle it now. A
		// fast consumer (a quiet machine) otherwise made every block anew.
		if p.cur != nil && p.blkUsed[p.cur] == 0 && len(p.free) < 8 {
			p.free = append(p.free, p.cur)
		}
		size := max(pumpBlock, n)
		var blk *[]byte
		if k := len(p.free); k > 0 && cap(*p.free[k-1]) >= size {
			blk = p.free[k-1]
			p.free = p.free[:k-1]
			*blk = (*blk)[:0]
		} else {
			s := make([]byte, 0, size)
			blk = &s
			p.allocs++
		}
		p.cur = blk
		p.blocks++
	}
	off := len(*p.cur)
	*p.cur = append(*p.cur, b...)
	p.q = append(p.q, pumpRec{blk: p.cur, data: (*p.cur)[off : off+n : off+n]})
	p.blkUsed[p.cur]++
	p.bytes += n
}

// release returns blk to the free list once all its records are consumed
// and it is not being filled; mu held.
func (p *pump) release(blk *[]byte) {
	if blk == nil {
		return
	}
	p.blkUsed[blk]--
	if p.blkUsed[blk] > 0 {
		return
	}
	delete(p.blkUsed, blk)
	if blk != p.cur && len(p.free) < 8 {
		p.free = append(p.free, blk)
	}
}

// next waits up to timeout for a queued record. Its bytes stay valid until
// the next call.
func (p *pump) next(timeout time.Duration) ([]byte, error) {
	var t *time.Timer
	for {
		p.mu.Lock()
		if p.held != nil {
			p.release(p.held)
			p.held = nil
		}
		if p.head < len(p.q) {
			rec := p.q[p.head]
			p.q[p.head] = pumpRec{}
			p.head++
			if p.head == len(p.q) {
				p.q, p.head = p.q[:0], 0
			}
			p.bytes -= len(rec.data)
			p.held = rec.blk
			p.mu.Unlock()
			select {
			case p.space <- struct{}{}:
			default:
			}
			if t != nil {
				t.Stop()
			}
			return rec.data, nil
		}
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if t == nil {
			t = time.NewTimer(timeout)
		}
		select {
		case <-p.notify:
		case <-t.C:
			return nil, os.ErrDeadlineExceeded
		}
	}
}
