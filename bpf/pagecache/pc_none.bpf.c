// SPDX-License-Identifier: GPL-2.0
/* The none policy (cistern/policy/none.bpf.h) with the page-cache agent's
 * pc_apply: the tracking cost alone. */
#include "vmlinux.h"
#include "cistern/policy/none.bpf.h"
#include "apply.bpf.h"
