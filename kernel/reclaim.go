package kernel

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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
}

// PageReclaim reads the switch (not the kernel version: MGLRU can be
// built and left off, or turned on at run time).
func PageReclaim() Reclaim {
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
