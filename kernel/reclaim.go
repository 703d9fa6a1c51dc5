package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// lruGenPath holds MGLRU's switches (CONFIG_LRU_GEN); bit 0 is the core one.
const lruGenPath = "/sys/kernel/mm/lru_gen/enabled"

// Reclaim is how the running kernel reclaims page cache: the classic
// active/inactive LRU or the multi-generational LRU (MGLRU, on by default
// in Debian's 7.x kernels, CONFIG_LRU_GEN_ENABLED). It matters to the
// page-cache comparisons: the kernel's own reclaim is the "default" the
// agent's policies are measured against, and FADV_NOREUSE only changes
// MGLRU's choices.
type Reclaim struct {
	MGLRU  bool
	Detail string // one sentence for people
	// Proactive: the DAMON schemes running that reclaim on their own, one
	// sentence each (none: nil).
	Proactive []string
}

// PageReclaim reads the switch (not the kernel version: MGLRU can be
// built and left off, or turned on at run time).
func PageReclaim() Reclaim {
	r := lruReclaim()
	r.Proactive = damonSchemes(damonPath)
	if len(r.Proactive) > 0 {
		r.Detail += "; " + strings.Join(r.Proactive, "; ")
	}
	return r
}

func lruReclaim() Reclaim {
	b, err := os.ReadFile(lruGenPath)
	if err != nil {
		return Reclaim{Detail: "classic active/inactive LRU (no MGLRU in this kernel)"}
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
	if err != nil {
		return Reclaim{Detail: fmt.Sprintf("unknown (%s: %q)", lruGenPath, strings.TrimSpace(string(b)))}
	}
	if v&1 == 0 {
		return Reclaim{Detail: fmt.Sprintf("classic active/inactive LRU (MGLRU built but off, lru_gen enabled=%#04x)", v)}
	}
	return Reclaim{MGLRU: true, Detail: fmt.Sprintf("MGLRU (lru_gen enabled=%#04x): the kernel's own reclaim, the page-cache bench's \"default\", is multi-generational, not the classic LRU the docs' figures were measured on; FADV_NOREUSE takes effect", v)}
}

// damonPath is DAMON's sysfs interface (CONFIG_DAMON_SYSFS).
const damonPath = "/sys/kernel/mm/damon/admin/kdamonds"

// damonSchemes describes the running DAMON schemes under root whose action
// reclaims or reorders what reclaim takes. A VM image can start one at
// boot: this machine's kdamond pages out physical memory left unaccessed
// for 60 s, up to 128 MiB a second, page cache included, whatever cgroup
// it is charged to (40 GB in its first seven hours). Page-cache figures
// measured beside it count its drops as misses for every mode alike.
func damonSchemes(root string) []string {
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	kds, _ := filepath.Glob(filepath.Join(root, "[0-9]*"))
	var out []string
	for _, kd := range kds {
		if read(filepath.Join(kd, "state")) != "on" {
			continue
		}
		ctxs, _ := filepath.Glob(filepath.Join(kd, "contexts", "[0-9]*"))
		for _, c := range ctxs {
			aggrUs, _ := strconv.ParseUint(read(filepath.Join(c, "monitoring_attrs", "intervals", "aggr_us")), 10, 64)
			schemes, _ := filepath.Glob(filepath.Join(c, "schemes", "[0-9]*"))
			for _, sc := range schemes {
				action := read(filepath.Join(sc, "action"))
				switch action {
				case "pageout", "cold", "lru_deprio", "lru_prio":
				default:
					continue
				}
				d := fmt.Sprintf("DAMON (kdamond %s) runs %s on %s memory", filepath.Base(kd), action, read(filepath.Join(c, "operations")))
				if age, err := strconv.ParseUint(read(filepath.Join(sc, "access_pattern", "age", "min")), 10, 64); err == nil && aggrUs > 0 {
					d += fmt.Sprintf(" left unaccessed for %s", time.Duration(age*aggrUs)*time.Microsecond)
				}
				q, _ := strconv.ParseUint(read(filepath.Join(sc, "quotas", "bytes")), 10, 64)
				ms, _ := strconv.ParseUint(read(filepath.Join(sc, "quotas", "reset_interval_ms")), 10, 64)
				if q > 0 && ms > 0 {
					d += fmt.Sprintf(", up to %d MiB per %s", q>>20, time.Duration(ms)*time.Millisecond)
				}
				out = append(out, d+": the kernel drops or reorders page cache outside any cgroup's limit")
			}
		}
	}
	return out
}
