// SPDX-License-Identifier: GPL-2.0
/* The lhd policy of bpf/evict/ with the page-cache agent's pc_apply; its
 * evict_periodic (the density table's rebuild) runs under the policy's
 * lock, from pc_apply and the sweep timer (PC_PERIODIC). */
/* Slots in [0, evict_next_unused) are resident or free: sample those. */
#define LHD_SAMPLE_SPAN evict_next_unused
#include "../evict/lhd.bpf.c"
#define PC_PERIODIC
#include "apply.bpf.h"
