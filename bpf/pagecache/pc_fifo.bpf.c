// SPDX-License-Identifier: GPL-2.0
/* The fifo policy of bpf/evict/ with the page-cache agent's pc_apply. */
#include "../evict/fifo.bpf.c"
#include "apply.bpf.h"
