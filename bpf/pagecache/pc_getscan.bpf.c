// SPDX-License-Identifier: GPL-2.0
/* GET-SCAN (cistern/policy/getscan.bpf.h) with the page-cache agent's
 * pc_apply, which tells it the thread that inserted each folio. */
#include "vmlinux.h"
#include "cistern/policy/getscan.bpf.h"
#define PC_ACTOR getscan_actor
#include "apply.bpf.h"
