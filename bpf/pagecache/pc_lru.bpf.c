// SPDX-License-Identifier: GPL-2.0
/* The lru policy of bpf/evict/ with the page-cache agent's pc_apply. */
#include "../evict/lru.bpf.c"
#include "apply.bpf.h"
