// SPDX-License-Identifier: GPL-2.0
/* LHD (cistern/policy/lhd.bpf.h) with the page-cache agent's pc_apply; its
 * evict_periodic (the density table's rebuild) runs under the policy's
 * lock, from pc_apply and the sweep timer (PC_PERIODIC). */
#include "vmlinux.h"
/* Slots in [0, evict_next_unused) are resident or free: sample those. */
#define LHD_SAMPLE_SPAN evict_next_unused
#include "cistern/policy/lhd.bpf.h"
#define PC_PERIODIC
#include "apply.bpf.h"
