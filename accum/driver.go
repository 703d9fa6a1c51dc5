package accum

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -cflags "-O2 -g -Wall -mcpu=v3 -I../bpf/include" -target bpfel -type accum_rec -type accum_drv_args drv ../bpf/accum/driver.bpf.c

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/kernel"
)

// DefaultStagingSize is the largest fragment a Driver feeds by default.
const DefaultStagingSize = 256 << 10

// Driver runs the channel of bpf/accum/driver.bpf.c from user space: each
// Write is one fragment fed to accum_write by BPF_PROG_TEST_RUN, exactly as
// a capture hook would. For tests, benchmarks and trying configurations.
type Driver struct {
	Coll    *ebpf.Collection
	Reader  *Reader
	Config  Config
	staging []byte
	objs    drvObjects
}

// OpenDriver loads the driver with cfg, arms the latency timer and opens a
// Reader on its ring. stagingSize bounds a fragment (0: DefaultStagingSize).
func OpenDriver(cfg Config, stagingSize uint32) (*Driver, error) {
	if stagingSize == 0 {
		stagingSize = DefaultStagingSize
	}
	spec, err := loadDrv()
	if err != nil {
		return nil, err
	}
	if err := cfg.Apply(spec); err != nil {
		return nil, err
	}
	spec.Maps["accum_staging"].ValueSize = stagingSize
	d := &Driver{Config: cfg.WithDefaults(), staging: make([]byte, stagingSize)}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		return nil, kernel.LoadError("the accum driver", err)
	}
	if err := runStart(d.objs.AccumStart); err != nil {
		d.objs.Close()
		return nil, err
	}
	if d.Reader, err = NewReader(d.objs.AccumRing); err != nil {
		d.objs.Close()
		return nil, err
	}
	return d, nil
}

func runStart(p *ebpf.Program) error {
	ret, err := kernel.CallRet(p)
	if err != nil {
		return err
	}
	if ret != 0 {
		return fmt.Errorf("accum_start: bpf_timer_start returned %d", int32(ret))
	}
	return nil
}

func (d *Driver) run(p *ebpf.Program, a *drvAccumDrvArgs) error {
	if err := kernel.Call(p, a); err != nil {
		return err
	}
	if a.Ret < 0 {
		return fmt.Errorf("accum: errno %d", -a.Ret)
	}
	return nil
}

// Write feeds data as one fragment of connection conn.
func (d *Driver) Write(conn uint64, pid, tid uint32, dir Direction, proto uint8, data []byte) error {
	if len(data) > len(d.staging) {
		return fmt.Errorf("accum driver: fragment of %d bytes, staging holds %d", len(data), len(d.staging))
	}
	copy(d.staging, data)
	if err := d.objs.AccumStaging.Update(uint32(0), d.staging, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("accum driver staging: %w", err)
	}
	a := drvAccumDrvArgs{ConnId: conn, Len: uint32(len(data)), Pid: pid, Tid: tid, Dir: uint8(dir), Proto: proto}
	return d.run(d.objs.DrvWrite, &a)
}

// Close closes connection conn (flush + close record).
func (d *Driver) Close(conn uint64) error {
	a := drvAccumDrvArgs{ConnId: conn}
	return d.run(d.objs.DrvClose, &a)
}

// FlushAged runs the latency sweep now for batches at least maxAge old and
// returns how many it flushed.
func (d *Driver) FlushAged(maxAge time.Duration) (int, error) {
	a := drvAccumDrvArgs{MaxAgeNs: uint64(maxAge.Nanoseconds())}
	err := d.run(d.objs.DrvFlushAged, &a)
	return int(a.Ret), err
}

// Stats reads the kernel counters.
func (d *Driver) Stats() (Stats, error) { return ReadStats(d.objs.AccumStats) }

// Shutdown closes the reader and the BPF objects (the timer dies with them).
func (d *Driver) Shutdown() error {
	err := d.Reader.Close()
	if e := d.objs.Close(); err == nil {
		err = e
	}
	return err
}
