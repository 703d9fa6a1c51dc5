// Package kernel is the one place that asks the running kernel what it
// offers and chooses, from the answers, which variant of a program or
// attachment each system uses. Systems call it instead of probing on their
// own; `cistern doctor` reports the same answers.
//
// Each feature is one row of the table in features.go: its probe, its name,
// the Linux release that has it (written there only) and a few words for
// people. Each probe runs at most once per process and returns nil when the
// feature works, or an error saying what is missing. Systems (systems.go)
// turns the answers into one sentence a user can read per system: what
// Cistern does instead. Attaching tc programs is internal/tc's.
package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// ErrMissing wraps every "the kernel lacks this" answer.
var ErrMissing = errors.New("not supported by this kernel")

// errTooOld is what a probe returns when the kernel refuses the feature as
// a kernel older than its row's Since does (beside ebpf.ErrNotSupported).
var errTooOld = errors.New("refused")

// VmlinuxPath is where the running kernel exposes its own BTF.
const VmlinuxPath = "/sys/kernel/btf/vmlinux"

// Release is the running kernel's release (uname -r).
var Release = sync.OnceValue(func() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
})

// AtLeast reports whether the running kernel's release is major.minor or
// newer. For what no probe can see (a fixed bug); a feature is probed
// instead (features.go).
func AtLeast(major, minor int) bool {
	ma, mi, ok := parseRelease(Release())
	return ok && (ma > major || ma == major && mi >= minor)
}

// parseRelease reads the major and minor numbers of a release such as
// "6.12.38+deb13-amd64".
func parseRelease(r string) (major, minor int, ok bool) {
	_, err := fmt.Sscanf(r, "%d.%d", &major, &minor)
	return major, minor, err == nil
}

// MultiUprobePIDFilter: a uprobe_multi link's pid filter traps every
// thread of the process from Linux 6.10 ("bpf: fix multi-uprobe PID
// filtering logic", 46ba0e49b642); before, only the thread whose id is the
// pid. A fixed bug: no probe tells, the release does.
func MultiUprobePIDFilter() bool { return AtLeast(6, 10) }

func probeBPFLoop() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnLoop) }

func probeTimer() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnTimerInit) }

func probeRingBuf() error { return features.HaveMapType(ebpf.RingBuf) }

func probeSyscallProgram() error { return features.HaveProgramType(ebpf.Syscall) }

func probeXDPLoadBytes() error { return features.HaveProgramHelper(ebpf.XDP, asm.FnXdpLoadBytes) }

// BTFSpec is the running kernel's BTF, loaded once (VmlinuxPath, or
// wherever cilium/ebpf finds it).
var BTFSpec = sync.OnceValues(btf.LoadKernelSpec)

// btfTracepoint: the kernel has the tracepoint name (a tp_btf or raw_tp
// target), as its BTF says (btf_trace_<name>).
func btfTracepoint(name string) error {
	spec, err := BTFSpec()
	if err != nil {
		return fmt.Errorf("kernel BTF: %w", err)
	}
	var typ *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &typ); err != nil {
		return errTooOld
	}
	return nil
}

func probeFilemapGetPages() error { return btfTracepoint("mm_filemap_get_pages") }

func probeCachestat() error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer f.Close()
	var cs unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0)
	if errors.Is(err, unix.ENOSYS) {
		return errTooOld
	}
	return err
}
