// Package kcomp makes the kernel a CBUF component: a BPF program on the
// sched_process_exec tracepoint writes exec records into pages of an
// mmapable array map and sends their indexes through a ring buffer; the
// manager hands them to user components as cbufs (mapped read-only) and
// returns each page to the kernel once it is dead everywhere.
package kcomp

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../../bpf/include" -target bpfel kcomp ../../bpf/cbuf/kcomp.bpf.c

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Pages is the kernel pool: one-page buffers.
const Pages = 64

// Source is the loaded kernel component (a cbuf.KernelSource).
type Source struct {
	objs kcompObjects
	tp   link.Link
	rd   *ringbuf.Reader
}

// Load loads and attaches the program and gives it every page.
func Load() (*Source, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	s := &Source{}
	if err := loadKcompObjects(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("load the kernel CBUF component: %w", err)
	}
	if err := s.objs.Kpool.Freeze(); err != nil {
		s.Close()
		return nil, fmt.Errorf("freeze the kernel pool: %w", err)
	}
	for i := uint32(0); i < Pages; i++ {
		if err := s.objs.Kfree.Update(nil, i, ebpf.UpdateAny); err != nil {
			s.Close()
			return nil, fmt.Errorf("fill the kernel free queue: %w", err)
		}
	}
	var err error
	if s.rd, err = ringbuf.NewReader(s.objs.Ksent); err != nil {
		s.Close()
		return nil, err
	}
	if s.tp, err = link.Tracepoint("sched", "sched_process_exec", s.objs.KcompExec, nil); err != nil {
		s.Close()
		return nil, fmt.Errorf("attach to sched_process_exec: %w", err)
	}
	return s, nil
}

// Close detaches and frees everything.
func (s *Source) Close() {
	if s.tp != nil {
		s.tp.Close()
	}
	if s.rd != nil {
		s.rd.Close()
	}
	s.objs.Close()
}

// Pages is the number of one-page buffers.
func (s *Source) Pages() uint32 { return Pages }

// ReadOnlyFd hands out the pool map. The map is frozen (Load), so user
// space can map it only read-only (a writable mmap fails with EPERM and
// mprotect cannot add write); only the BPF program writes it. A BPF_F_RDONLY
// fd would not do: a read-only file cannot have a shared mapping at all.
func (s *Source) ReadOnlyFd() (int, error) {
	return unix.FcntlInt(uintptr(s.objs.Kpool.FD()), unix.F_DUPFD_CLOEXEC, 0)
}

// Take waits for the next page the kernel sent.
func (s *Source) Take(ctx context.Context) (uint32, error) {
	for {
		if dl, ok := ctx.Deadline(); ok {
			s.rd.SetDeadline(dl)
		}
		rec, err := s.rd.Read()
		if err != nil {
			return 0, err
		}
		if len(rec.RawSample) >= 4 {
			return binary.LittleEndian.Uint32(rec.RawSample), nil
		}
	}
}

// Give returns a dead page to the kernel.
func (s *Source) Give(idx uint32) error {
	return s.objs.Kfree.Update(nil, idx, ebpf.UpdateAny)
}

// Drops counts execs that found no free page.
func (s *Source) Drops() uint64 {
	var v uint64
	s.objs.Kdrops.Lookup(uint32(0), &v)
	return v
}
