// SPDX-License-Identifier: GPL-2.0
/* The s3fifo policy (cistern/policy/s3fifo.bpf.h) with the page-cache agent's pc_apply. */
#include "vmlinux.h"
#include "cistern/policy/s3fifo.bpf.h"
#include "apply.bpf.h"
