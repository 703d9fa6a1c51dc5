// SPDX-License-Identifier: GPL-2.0
/* The s3fifo policy of bpf/evict/ with the page-cache agent's pc_apply. */
#include "../evict/s3fifo.bpf.c"
#include "apply.bpf.h"
