// SPDX-License-Identifier: GPL-2.0
/* The lfu policy (cistern/policy/lfu.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/lfu.bpf.h"
#include "apply.bpf.h"
