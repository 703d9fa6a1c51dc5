/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/lru.bpf.h - the lru eviction policy on cistern/evict.bpf.h.
 *
 * LRU: new and accessed entries go to the head; victims come from the tail.
 *
 * Included by the stubs bpf/evict/lru.bpf.c (replay, Kerby-KV) and
 * bpf/pagecache/pc_lru.bpf.c (the page-cache agent), after vmlinux.h; its
 * row in evict/registry.go is "lru".
 */
#ifndef CISTERN_POLICY_LRU_BPF_H
#define CISTERN_POLICY_LRU_BPF_H

#include "cistern/evict.bpf.h"

static __u32 q;

static long propose_cb(__u32 slot, struct evict_iter *it)
{
	return evict_propose(it->ctx, slot) ? EVICT_ITER_STOP : EVICT_ITER_CONTINUE;
}
EVICT_ITERATOR(propose_iter, propose_cb)

static int evict_policy_init(void)
{
	int l = evict_list_create();

	if (l < 0)
		return l;
	q = l;
	return 0;
}

static void evict_policy_added(__u32 slot) { evict_list_add_head(q, slot); }
static void evict_policy_accessed(__u32 slot) { evict_list_move_head(q, slot); }
static void evict_policy_removed(__u32 slot) { }

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct evict_iter it = { .ctx = ctx };

	evict_list_iterate(&it, q, EVICT_NIL, EVICT_TOWARDS_HEAD, 0, ctx->nr, propose_iter);
}

#endif /* CISTERN_POLICY_LRU_BPF_H */
