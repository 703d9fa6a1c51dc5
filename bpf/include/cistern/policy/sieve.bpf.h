/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/sieve.bpf.h - the sieve eviction policy on cistern/evict.bpf.h.
 *
 * SIEVE (Zhang et al., NSDI'24): one FIFO queue, new entries at the head, a
 * hit sets the entry's visited bit and moves nothing. The hand walks from the
 * tail towards the head: a visited entry has its bit cleared and stays where
 * it is; the first unvisited one is the victim, and the hand stays at the
 * entry before it (towards the head). Past the head the hand wraps to the
 * tail.
 *
 * Included by the stubs bpf/evict/sieve.bpf.c (replay, Kerby-KV), after
 * vmlinux.h; its row in evict/registry.go is "sieve".
 */
#ifndef CISTERN_POLICY_SIEVE_BPF_H
#define CISTERN_POLICY_SIEVE_BPF_H

#include "cistern/evict.bpf.h"

static __u32 q;
static __u32 hand = EVICT_NIL;

static long sieve_cb(__u32 slot, struct evict_iter *it)
{
	struct evict_node *n = evict_node(slot);

	if (n && n->pdata) {
		n->pdata = 0;
		return EVICT_ITER_CONTINUE;
	}
	/* removed() moves the hand on to the entry before, if slot goes. */
	hand = slot;
	return evict_propose(it->ctx, slot) ? EVICT_ITER_STOP : EVICT_ITER_CONTINUE;
}
EVICT_ITERATOR(sieve_iter, sieve_cb)

static int evict_policy_init(void)
{
	int l = evict_list_create();

	if (l < 0)
		return l;
	q = l;
	hand = EVICT_NIL;
	return 0;
}

static void evict_policy_added(__u32 slot) { evict_list_add_head(q, slot); }

static void evict_policy_accessed(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (n)
		n->pdata = 1;
}

static void evict_policy_removed(__u32 slot)
{
	if (slot == hand)
		hand = evict_prev(slot);
}

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct evict_iter it = { .ctx = ctx };
	__u32 len = evict_list_len(q);

	/* Within two rounds every bit has been cleared once. With nr > 1 a walk
	 * of len slots keeps one proposal per entry. */
	evict_list_iterate(&it, q, hand, EVICT_TOWARDS_HEAD, 1,
			   ctx->nr > 1 ? len : 2 * len + 1, sieve_iter);
}

#endif /* CISTERN_POLICY_SIEVE_BPF_H */
