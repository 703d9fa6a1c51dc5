// SPDX-License-Identifier: GPL-2.0
/* The oldest-biggest policy (evictbig.bpf.h) with the page-cache agent's
 * pc_apply. */
#include "vmlinux.h"
#include "evictbig.bpf.h"
#include "../pagecache/apply.bpf.h"
