// SPDX-License-Identifier: GPL-2.0
/* The wtinylfu policy (cistern/policy/wtinylfu.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/wtinylfu.bpf.h"
#include "apply.bpf.h"
