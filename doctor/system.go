package doctor

import (
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/mounts"
	"github.com/cistern-ebpf/cistern/kernel"
)

func systemChecks() []Check {
	var cs []Check

	// No release floor: each feature is probed, and the systems section
	// says which system runs, degraded or not, on this kernel.
	cs = append(cs, ok("kernel", "release "+kernel.Release()+" (features are probed one by one; see the systems below)"))

	if spec, err := kernel.BTFSpec(); err != nil {
		cs = append(cs, fail("btf", Missing, err, "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y"))
	} else {
		n := 0
		for range spec.All() {
			n++
		}
		cs = append(cs, ok("btf", fmt.Sprintf("%s, %d types", kernel.VmlinuxPath, n)))
	}

	cs = append(cs, mountCheck("tracefs", mounts.Tracefs))
	cs = append(cs, mountCheck("bpffs", mounts.BPFFS))

	// Lockdown lives in securityfs; mount it to read it.
	lock := Check{Name: "lockdown", Core: true}
	mountedNow, err := mounts.Ensure(mounts.Securityfs)
	data, rerr := os.ReadFile("/sys/kernel/security/lockdown")
	switch {
	case err != nil || rerr != nil:
		lock.Status, lock.Detail = OK, "no lockdown LSM (nothing restricts BPF)"
	default:
		mode := "none"
		for _, f := range strings.Fields(string(data)) {
			if strings.HasPrefix(f, "[") {
				mode = strings.Trim(f, "[]")
			}
		}
		if mode == "confidentiality" {
			lock.Status = Unsupported
			lock.Detail = "lockdown=confidentiality forbids reading kernel memory from BPF"
			lock.Fix = "boot with lockdown=integrity or none"
		} else {
			lock.Status, lock.Detail = OK, "lockdown="+mode+" (BPF tracing and XDP allowed)"
		}
		if mountedNow {
			lock.Detail += "; mounted securityfs at /sys/kernel/security to read it"
		}
	}
	cs = append(cs, lock)

	var rl unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl)
	if err := rlimit.RemoveMemlock(); err != nil {
		cs = append(cs, fail("memlock", Missing, err, "run as root or raise RLIMIT_MEMLOCK (ulimit -l unlimited)"))
	} else {
		cs = append(cs, ok("memlock", fmt.Sprintf("BPF memory is charged to the memory cgroup (RLIMIT_MEMLOCK was %s)", fmtLimit(rl.Cur))))
	}

	cs = append(cs, memcgCheck())
	// Not a requirement: which reclaim the page-cache agent competes with.
	cs = append(cs, Check{Name: "reclaim", Status: OK, Detail: kernel.PageReclaim().Detail})
	return cs
}

func fmtLimit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v/1024)
}

func mountCheck(name string, fs mounts.FS) Check {
	mountedNow, err := mounts.Ensure(fs)
	if err != nil {
		return fail(name, Missing, err, "run as root, or mount -t "+fs.Type+" "+fs.Type+" "+fs.Path)
	}
	if mountedNow {
		return ok(name, "was not mounted: mounted "+fs.Type+" at "+fs.Path)
	}
	return ok(name, "mounted at "+fs.Path)
}

func memcgCheck() Check {
	if data, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(data), "memory") {
		return Check{Name: "memory_cgroup", Status: OK, Detail: "cgroup v2 memory controller at /sys/fs/cgroup"}
	}
	for _, mp := range mounts.MountPoints("cgroup") {
		if _, err := os.Stat(mp + "/memory.limit_in_bytes"); err == nil {
			return Check{Name: "memory_cgroup", Status: OK, Detail: "cgroup v1 memory controller at " + mp}
		}
	}
	for _, mp := range mounts.MountPoints("cgroup2") {
		if data, err := os.ReadFile(mp + "/cgroup.controllers"); err == nil && strings.Contains(string(data), "memory") {
			return Check{Name: "memory_cgroup", Status: OK, Detail: "cgroup v2 memory controller at " + mp}
		}
	}
	return Check{Name: "memory_cgroup", Status: Missing, Core: false,
		Detail: "no memory cgroup controller mounted (needed by the page-cache agent only)",
		Fix:    "mount -t cgroup -o memory none /sys/fs/cgroup/memory, or enable cgroup v2 with memory"}
}
