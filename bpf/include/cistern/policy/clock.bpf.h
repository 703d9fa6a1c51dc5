/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/clock.bpf.h - the clock eviction policy on cistern/evict.bpf.h.
 *
 * CLOCK (FIFO with reinsertion, one reference bit, as libCacheSim's Clock):
 * new entries go to the head with the bit clear; a hit sets it. To evict,
 * look at the tail: a set bit is cleared and the entry moves to the head,
 * a clear bit makes the entry the victim.
 *
 * Included by the stubs bpf/evict/clock.bpf.c (replay, Kerby-KV), after
 * vmlinux.h; its row in evict/registry.go is "clock".
 */
#ifndef CISTERN_POLICY_CLOCK_BPF_H
#define CISTERN_POLICY_CLOCK_BPF_H

#include "cistern/evict.bpf.h"

static __u32 q;

static long clock_cb(__u32 slot, struct evict_iter *it)
{
	struct evict_node *n = evict_node(slot);

	if (n && n->pdata) {
		n->pdata = 0;
		evict_list_move_head(q, slot);
		return EVICT_ITER_CONTINUE;
	}
	return evict_propose(it->ctx, slot) ? EVICT_ITER_STOP : EVICT_ITER_CONTINUE;
}
EVICT_ITERATOR(clock_iter, clock_cb)

static int evict_policy_init(void)
{
	int l = evict_list_create();

	if (l < 0)
		return l;
	q = l;
	return 0;
}

static void evict_policy_added(__u32 slot) { evict_list_add_head(q, slot); }

static void evict_policy_accessed(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (n)
		n->pdata = 1;
}

static void evict_policy_removed(__u32 slot) { }

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct evict_iter it = { .ctx = ctx };

	/* Each entry is looked at most twice: once to clear its bit, once more
	 * after it went round. */
	evict_list_iterate(&it, q, EVICT_NIL, EVICT_TOWARDS_HEAD, 0,
			   2 * evict_list_len(q) + 1, clock_iter);
}

#endif /* CISTERN_POLICY_CLOCK_BPF_H */
