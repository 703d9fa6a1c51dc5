/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/none.bpf.h - the none eviction policy on cistern/evict.bpf.h.
 *
 * A policy that decides nothing (and proposes no victim): the page-cache
 * agent's tracking cost alone, for `cistern bench pagecache`'s overhead
 * part. The agent accepts it; its help does not offer it.
 *
 * Included by the stub bpf/pagecache/pc_none.bpf.c, after vmlinux.h; its
 * row in evict/registry.go is "none".
 */
#ifndef CISTERN_POLICY_NONE_BPF_H
#define CISTERN_POLICY_NONE_BPF_H

#include "cistern/evict.bpf.h"

static int evict_policy_init(void) { return 0; }
static void evict_policy_added(__u32 slot) { }
static void evict_policy_accessed(__u32 slot) { }
static void evict_policy_removed(__u32 slot) { }
static void evict_policy_evict(struct evict_ctx *ctx) { }

#endif /* CISTERN_POLICY_NONE_BPF_H */
