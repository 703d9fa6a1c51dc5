// SPDX-License-Identifier: GPL-2.0
/* The fifo policy (cistern/policy/fifo.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/fifo.bpf.h"
#include "apply.bpf.h"
