/* SPDX-License-Identifier: GPL-2.0 */
/*
 * evictbig.bpf.h - the oldest-biggest eviction policy, added from its own
 * package as docs/eviction.md ("Adding a policy") says: this header, its
 * stubs evictbig.bpf.c (replay) and pc_evictbig.bpf.c (the page-cache
 * agent), and one registry row (examples/evictbig, evict.Register).
 *
 * A complete small eviction policy, the example of cistern/evict.bpf.h:
 * "oldest-biggest". Entries queue in insertion order; to evict, look at the
 * EB_WINDOW oldest and propose the largest of them (ties: the oldest), so a
 * big object makes room for many small ones while recency still bounds how
 * long anything stays. Hits change nothing (a FIFO at heart).
 */
#ifndef EVICTBIG_BPF_H
#define EVICTBIG_BPF_H

#include "cistern/evict.bpf.h"

#define EB_WINDOW 4

/* Not static: clang would narrow it and drop the list-id check. */
__u32 eb_q;

struct eb_best {
	__u32 slot;
	__u32 size;
};

/* Called for each of the oldest entries (EVICT_ITERATOR below). */
static long window_cb(__u32 slot, struct evict_iter *it)
{
	struct eb_best *b = it->data;
	struct evict_entry *e = evict_entry(slot);

	/* evict_loop_var: what earlier calls left (see evict.bpf.h, BPF_LOOP
	 * CALLBACKS BEFORE LINUX 6.7). */
	if (e && (evict_loop_var(b->slot) == EVICT_NIL || e->size > evict_loop_var(b->size))) {
		b->slot = slot;
		b->size = e->size;
	}
	return EVICT_ITER_CONTINUE;
}
EVICT_ITERATOR(window_iter, window_cb)

static int evict_policy_init(void)
{
	int l = evict_list_create();

	if (l < 0)
		return l;
	eb_q = l;
	return 0;
}

static void evict_policy_added(__u32 slot) { evict_list_add_head(eb_q & (EVICT_MAX_LISTS - 1), slot); }
static void evict_policy_accessed(__u32 slot) { }
static void evict_policy_removed(__u32 slot) { }

/* One proposal per call; when more are wanted the cache's fallback
 * completes (and counts it), which never happens here: the cache asks for
 * one at a time. */
static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct eb_best b = { .slot = EVICT_NIL };
	struct evict_iter it = { .ctx = ctx, .data = &b };

	evict_list_iterate(&it, eb_q & (EVICT_MAX_LISTS - 1), EVICT_NIL, EVICT_TOWARDS_HEAD, 0, EB_WINDOW, window_iter);
	if (b.slot != EVICT_NIL)
		evict_propose(ctx, b.slot);
}

#endif /* EVICTBIG_BPF_H */
