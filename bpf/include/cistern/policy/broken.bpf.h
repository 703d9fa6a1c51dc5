/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/broken.bpf.h - the broken eviction policy on cistern/evict.bpf.h.
 *
 * A deliberately broken policy, for tests: keeps no lists, and proposes
 * garbage (no slot, out-of-range slots) claiming more candidates than the
 * context holds. The registry refuses every proposal and the fallback makes
 * the room; evict_stats counts both.
 *
 * Included by the stubs bpf/evict/broken.bpf.c (replay, Kerby-KV), after
 * vmlinux.h; its row in evict/registry.go is "broken".
 */
#ifndef CISTERN_POLICY_BROKEN_BPF_H
#define CISTERN_POLICY_BROKEN_BPF_H

#include "cistern/evict.bpf.h"

static int evict_policy_init(void) { return 0; }
static void evict_policy_added(__u32 slot) { }
static void evict_policy_accessed(__u32 slot) { }
static void evict_policy_removed(__u32 slot) { }

__u64 broken_calls;

/* Even calls propose nothing (too few); odd calls fill the context with
 * slots that do not exist and claim 1000 of them. */
static void evict_policy_evict(struct evict_ctx *ctx)
{
	if (broken_calls++ % 2 == 0)
		return;
	for (__u32 i = 0; i < EVICT_MAX_CANDIDATES; i++)
		ctx->cand[i] = i % 2 ? EVICT_NIL : evict_capacity + i;
	ctx->n = 1000;
}

#endif /* CISTERN_POLICY_BROKEN_BPF_H */
