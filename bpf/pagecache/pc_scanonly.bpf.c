// SPDX-License-Identifier: GPL-2.0
/* Scan-only: GET-SCAN's scan list alone. The registered scanners' folios
 * are the agent's victims, oldest first; every other folio is tracked but
 * left to the kernel's own LRU: the policy declines (no fallback) when no
 * scan folio is tracked, and the kernel reclaims at the cgroup's limit as
 * it would without an agent. Why: on RocksDB (docs/pagecache.md) the
 * kernel's two lists keep point reads' pages as well as the agent's LFU,
 * and each agent eviction of a scattered 4 KiB page is a syscall of its
 * own, while a scan's pages go in long ranges. */
#define GS_SCAN_ONLY
#define EVICT_NO_FALLBACK
#include "vmlinux.h"
#include "cistern/policy/getscan.bpf.h"
#define PC_ACTOR getscan_actor
#include "apply.bpf.h"
