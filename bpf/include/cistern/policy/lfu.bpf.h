/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/lfu.bpf.h - the lfu eviction policy on cistern/evict.bpf.h.
 *
 * Approximate LFU by batch scoring: each entry counts its hits (pdata,
 * saturating). To evict, a hand walks EVICT_SAMPLES entries of the insertion
 * list (from the tail towards the head, wrapping), scores them by count and
 * proposes the nr lowest (ties: the first one walked). The hand then rests
 * on the next entry, so successive evictions sample the whole cache in turn
 * (like a CLOCK hand) instead of rescoring the same oldest entries.
 * With at most EVICT_SAMPLES entries resident this is exact LFU; beyond that
 * a victim is only the least frequent of its sample. Counts never age.
 *
 * Included by the stubs bpf/evict/lfu.bpf.c (replay, Kerby-KV) and
 * bpf/pagecache/pc_lfu.bpf.c (the page-cache agent), after vmlinux.h; its
 * row in evict/registry.go is "lfu".
 */
#ifndef CISTERN_POLICY_LFU_BPF_H
#define CISTERN_POLICY_LFU_BPF_H

#include "cistern/evict.bpf.h"

/* Not static: clang would narrow it and drop the verifier's bounds. */
__u32 lfu_q;
static __u32 hand = EVICT_NIL;

static __always_inline __u32 qid(__u32 q)
{
	asm volatile("%0 &= 7" : "+r"(q));
	return q;
}

EVICT_ITERATOR(sample_iter, evict_sample_pdata)

static int evict_policy_init(void)
{
	int l = evict_list_create();

	if (l < 0)
		return l;
	lfu_q = l;
	hand = EVICT_NIL;
	return 0;
}

static void evict_policy_added(__u32 slot) { evict_list_add_head(qid(lfu_q), slot); }

static void evict_policy_accessed(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (n && n->pdata < 0xffffffffu)
		n->pdata++;
}

static void evict_policy_removed(__u32 slot)
{
	if (slot == hand)
		hand = evict_prev(slot);
}

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct evict_sample s = {};
	struct evict_iter it = { .ctx = ctx, .data = &s };
	__u32 len = evict_list_len(qid(lfu_q)), max = len < EVICT_SAMPLES ? len : EVICT_SAMPLES;

	evict_list_iterate(&it, qid(lfu_q), hand, EVICT_TOWARDS_HEAD, 1, max, sample_iter);
	hand = it.cur;
	evict_propose_lowest(ctx, &s, ctx->nr);
}

#endif /* CISTERN_POLICY_LFU_BPF_H */
