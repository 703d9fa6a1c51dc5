// SPDX-License-Identifier: GPL-2.0
/* The mru policy of bpf/evict/ with the page-cache agent's pc_apply. */
#include "../evict/mru.bpf.c"
#include "apply.bpf.h"
