// SPDX-License-Identifier: GPL-2.0
/* GET-SCAN (bpf/evict/getscan.bpf.c) with the page-cache agent's pc_apply,
 * which tells it the thread that inserted each folio. */
#include "../evict/getscan.bpf.c"
#define PC_ACTOR getscan_actor
#include "apply.bpf.h"
