/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict/cache.bpf.h - eviction: the cache.
 *
 * Part of cistern/evict.bpf.h (include that, not this): the cache that
 * calls the policy. evict_remove checks a proposal against the registry
 * and removes it; evict_make_room asks the policy for victims and
 * completes with the fallback (unless EVICT_NO_FALLBACK);
 * evict_alloc_slot finds a free slot; evict_cache_access looks a key up
 * and inserts it on a miss, within evict_capacity slots and, with
 * evict_byte_capacity, a budget of sizes.
 */
#ifndef CISTERN_EVICT_CACHE_BPF_H
#define CISTERN_EVICT_CACHE_BPF_H

/* ---- the cache ---- */

/* Removes the entry in slot if it is resident; returns 0, or -ENOENT for a
 * proposal the registry refuses. */
static __always_inline int evict_remove(__u32 slot, struct evict_req *r)
{
	struct evict_entry *e = evict_entry(slot);
	struct evict_node *n;
	__u32 *f, top;

	if (!e || !e->resident)
		return -EVICT_ENOENT;
	evict_policy_removed(slot);
	n = evict_node(slot);
	if (n)
		evict_unlink(n);
	bpf_map_delete_elem(&evict_index, &e->key);
	e->resident = 0;
	evict_used_bytes -= evict_used_bytes >= e->size ? e->size : evict_used_bytes;
	if (evict_report_victims) {
		struct evict_event v = { .key = e->key, .size = e->size, .op = EVICT_EV_REMOVE };

		if (bpf_map_push_elem(&evict_victims, &v, 0))
			evict_stat_add(EVICT_STAT_VICTIMS_LOST, 1);
	}
	if (r) {
		r->evicted++;
		r->victim = e->key;
	}
	top = evict_free_top;
	f = bpf_map_lookup_elem(&evict_free, &top);
	if (f) {
		*f = slot;
		evict_free_top = top + 1;
	}
	evict_stat_add(EVICT_STAT_EVICTIONS, 1);
	return 0;
}

struct evict_fallback_loop {
	__u32 want;
	__u32 done;
	struct evict_req *r;
};

#ifndef EVICT_NO_FALLBACK
static long evict_fallback_step(__u64 i, void *arg)
{
	struct evict_fallback_loop *fl = arg;
	__u32 s = evict_fallback_hand;

	evict_fallback_hand = s + 1 >= evict_capacity ? 0 : s + 1;
	if (evict_remove(s, fl->r) == 0)
		fl->done++;
	return evict_loop_var(fl->done) >= fl->want;
}
#endif

/* Asks the policy for nr victims and removes them; completes with the
 * fallback (unless EVICT_NO_FALLBACK: a policy that may decline, leaving
 * the rest to someone else). Returns how many entries were removed. */
static __always_inline __u32 evict_make_room(__u32 nr, struct evict_req *r)
{
	__u32 zero = 0, n, freed = 0, invalid = 0;
	struct evict_ctx *ctx = bpf_map_lookup_elem(&evict_ctxs, &zero);

	if (!ctx)
		return 0;
	if (nr > EVICT_MAX_CANDIDATES)
		nr = EVICT_MAX_CANDIDATES;
	ctx->nr = nr;
	ctx->n = 0;
	evict_policy_evict(ctx);
	n = ctx->n;
	if (n > EVICT_MAX_CANDIDATES)
		n = EVICT_MAX_CANDIDATES;
	evict_stat_add(EVICT_STAT_EVICT_CALLS, 1);
	evict_stat_add(EVICT_STAT_PROPOSED, n);
	if (n < nr)
		evict_stat_add(EVICT_STAT_SHORT, 1);
	for (__u32 i = 0; i < EVICT_MAX_CANDIDATES; i++) {
		if (i >= n || freed >= nr)
			break;
		if (evict_remove(ctx->cand[i & (EVICT_MAX_CANDIDATES - 1)], r) == 0)
			freed++;
		else
			invalid++;
	}
	if (invalid)
		evict_stat_add(EVICT_STAT_INVALID, invalid);
#ifndef EVICT_NO_FALLBACK
	if (freed < nr) {
		struct evict_fallback_loop fl = { .want = nr - freed, .r = r };

		bpf_loop(evict_capacity, evict_fallback_step, &fl, 0);
		evict_stat_add(EVICT_STAT_FALLBACKS, 1);
		evict_stat_add(EVICT_STAT_FALLBACK_EVICTIONS, fl.done);
		freed += fl.done;
	}
#endif
	return freed;
}

/* A free slot: never used, recycled, or made by evicting. EVICT_NIL if none. */
static __always_inline __u32 evict_alloc_slot(struct evict_req *r)
{
	__u32 s, top, *f;

	if (evict_next_unused < evict_capacity)
		return evict_next_unused++;
	if (!evict_free_top)
		evict_make_room(1, r);
	top = evict_free_top;
	if (!top)
		return EVICT_NIL;
	top--;
	f = bpf_map_lookup_elem(&evict_free, &top);
	if (!f)
		return EVICT_NIL;
	evict_free_top = top;
	s = *f;
	return s;
}

struct evict_fit_loop {
	struct evict_req *r;
};

static long evict_fit_step(__u64 i, void *arg)
{
	struct evict_req *r = ((struct evict_fit_loop *)arg)->r;

	if (evict_used_bytes + r->size <= evict_byte_capacity)
		return 1;
	return !evict_make_room(1, r);
}

/* Looks r->key up; on a miss inserts it, evicting as the policy says.
 * Returns 1 on a hit. */
static __always_inline int evict_cache_access(struct evict_req *r)
{
	__u32 *sp = bpf_map_lookup_elem(&evict_index, &r->key), s;
	struct evict_entry *e;
	struct evict_node *n;

	if (sp) {
		if (!(r->flags & EVICT_REQ_UNSEEN)) {
			evict_req_flags = r->flags;
			evict_policy_accessed(*sp);
		}
		return 1;
	}
	if (evict_byte_capacity) {
		struct evict_fit_loop fit = { .r = r };

		if (r->size > evict_byte_capacity) {
			evict_stat_add(EVICT_STAT_TOO_BIG, 1);
			return 0;
		}
		/* One victim at a time, each taking at least one entry's size. */
		bpf_loop(evict_capacity, evict_fit_step, &fit, 0);
		if (evict_used_bytes + r->size > evict_byte_capacity) {
			evict_stat_add(EVICT_STAT_NO_ROOM, 1);
			return 0;
		}
	}
	s = evict_alloc_slot(r);
	e = evict_entry(s);
	n = evict_node(s);
	if (!e || !n) {
		evict_stat_add(EVICT_STAT_NO_ROOM, 1);
		return 0;
	}
	if (bpf_map_update_elem(&evict_index, &r->key, &s, BPF_NOEXIST)) {
		/* Cannot happen while the index is as large as the cache. */
		__u32 top = evict_free_top, *f = bpf_map_lookup_elem(&evict_free, &top);

		if (f) {
			*f = s;
			evict_free_top = top + 1;
		}
		evict_stat_add(EVICT_STAT_NO_ROOM, 1);
		return 0;
	}
	e->key = r->key;
	e->size = r->size;
	e->resident = 1;
	evict_used_bytes += r->size;
	/* A free slot is on no list: remove() unlinked it, or it was never used
	 * (its zeroed node must not be taken for a member of list 0). */
	n->prev = n->next = n->list = EVICT_NIL;
	n->pdata = 0;
	evict_stat_add(EVICT_STAT_INSERTS, 1);
	evict_req_flags = r->flags;
	evict_policy_added(s);
	return 0;
}

#endif /* CISTERN_EVICT_CACHE_BPF_H */
