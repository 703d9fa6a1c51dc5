// SPDX-License-Identifier: GPL-2.0
/* The lfu policy of bpf/evict/ with the page-cache agent's pc_apply. */
#include "../evict/lfu.bpf.c"
#include "apply.bpf.h"
