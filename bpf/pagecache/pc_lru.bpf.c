// SPDX-License-Identifier: GPL-2.0
/* The lru policy (cistern/policy/lru.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/lru.bpf.h"
#include "apply.bpf.h"
