// SPDX-License-Identifier: GPL-2.0
/* A policy that decides nothing (and proposes no victim): the agent's
 * tracking cost alone, for `cistern bench pagecache`'s overhead part. */
#include "vmlinux.h"
#include "cistern/evict.bpf.h"

static int evict_policy_init(void) { return 0; }
static void evict_policy_added(__u32 slot) { }
static void evict_policy_accessed(__u32 slot) { }
static void evict_policy_removed(__u32 slot) { }
static void evict_policy_evict(struct evict_ctx *ctx) { }

#include "apply.bpf.h"
