// SPDX-License-Identifier: GPL-2.0
/* The mru policy (cistern/policy/mru.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/mru.bpf.h"
#include "apply.bpf.h"
