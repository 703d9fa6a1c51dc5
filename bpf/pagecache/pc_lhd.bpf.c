// SPDX-License-Identifier: GPL-2.0
/* The lhd policy of bpf/evict/ with the page-cache agent's pc_apply; the
 * agent runs its evict_periodic (the density table's rebuild) between
 * batches. */
/* Slots in [0, evict_next_unused) are resident or free: sample those. */
#define LHD_SAMPLE_SPAN evict_next_unused
#include "../evict/lhd.bpf.c"
#include "apply.bpf.h"
