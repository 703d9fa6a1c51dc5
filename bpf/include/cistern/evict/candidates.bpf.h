/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict/candidates.bpf.h - eviction: candidates and sampling.
 *
 * Part of cistern/evict.bpf.h (include that, not this): what a policy's
 * evict() uses to choose. evict_propose appends a victim to the context;
 * EVICT_ITERATOR and evict_list_iterate walk a list with a bounded
 * bpf_loop; evict_sample_pdata and evict_propose_lowest score a sample of
 * entries by pdata and propose the lowest (approximate LFU, GET-SCAN).
 */
#ifndef CISTERN_EVICT_CANDIDATES_BPF_H
#define CISTERN_EVICT_CANDIDATES_BPF_H

/* ---- candidates ---- */

/* Appends slot to ctx's candidates; returns 1 once ctx holds nr of them (or
 * is full), so a walk can stop. */
static __always_inline int evict_propose(struct evict_ctx *ctx, __u32 slot)
{
	__u32 n = ctx->n;

	if (n >= EVICT_MAX_CANDIDATES)
		return 1;
	ctx->cand[n & (EVICT_MAX_CANDIDATES - 1)] = slot;
	ctx->n = ++n;
	return n >= ctx->nr || n >= EVICT_MAX_CANDIDATES;
}

/* ---- bounded iteration ---- */

struct evict_iter {
	__u32 cur;   /* slot the next step visits */
	__u32 list;
	__u32 dir;   /* EVICT_TOWARDS_HEAD or EVICT_TOWARDS_TAIL */
	__u32 wrap;
	__u32 steps; /* slots visited so far */
	__u32 pad;
	struct evict_ctx *ctx;  /* for evict_propose, may be NULL */
	void *data;             /* the policy's */
};

#define EVICT_ITERATOR(name, fn)                                              \
	static long name(__u64 i, void *arg)                                  \
	{                                                                     \
		struct evict_iter *it = arg;                                  \
		__u32 s = evict_loop_var(it->cur), nx;                        \
		if (s == EVICT_NIL)                                           \
			return 1;                                             \
		nx = it->dir == EVICT_TOWARDS_HEAD ? evict_prev(s) : evict_next(s); \
		if (nx == EVICT_NIL && it->wrap)                              \
			nx = it->dir == EVICT_TOWARDS_HEAD ? evict_list_tail(it->list) \
							   : evict_list_head(it->list); \
		it->cur = nx;                                                 \
		it->steps++;                                                  \
		return fn(s, it);                                             \
	}

/* Visits at most max slots of list from start (EVICT_NIL: the end the walk
 * starts from), calling the EVICT_ITERATOR cb for each. */
#define evict_list_iterate(itp, list_, start, dir_, wrap_, max, cb)          \
	({                                                                    \
		(itp)->list = (list_);                                        \
		(itp)->dir = (dir_);                                          \
		(itp)->wrap = (wrap_);                                        \
		(itp)->steps = 0;                                             \
		(itp)->cur = (start) != EVICT_NIL ? (start)                   \
			: ((dir_) == EVICT_TOWARDS_HEAD ? evict_list_tail(list_) \
							: evict_list_head(list_)); \
		bpf_loop((max), cb, (itp), 0);                                \
	})

/* ---- batch scoring: sample entries, propose the lowest scores ---- */

/* A sample of up to EVICT_SAMPLES entries and their scores (approximate
 * LFU and GET-SCAN score by the node's pdata, their use count). */
#define EVICT_SAMPLES 8

struct evict_sample {
	/* 64 bits: n must not share a stack slot with slot[], or 6.1's verifier
	 * refuses to read it back after evict_propose_lowest marks a slot[]
	 * taken ("invalid size of register fill"). */
	__u64 n;
	__u32 slot[EVICT_SAMPLES];
	__u32 score[EVICT_SAMPLES];
};

/* evict_sample_pdata: an EVICT_ITERATOR callback that adds each slot it
 * visits, scored by its pdata, to the struct evict_sample in it->data:
 *   EVICT_ITERATOR(sample_iter, evict_sample_pdata)
 *   struct evict_sample s = {}; struct evict_iter it = { .data = &s };
 *   evict_list_iterate(&it, list, hand, EVICT_TOWARDS_HEAD, 1, max, sample_iter); */
static __always_inline long evict_sample_pdata(__u32 slot, struct evict_iter *it)
{
	struct evict_sample *s = it->data;
	struct evict_node *nd = evict_node(slot);
	__u32 i = evict_loop_var(s->n);

	if (i >= EVICT_SAMPLES)
		return EVICT_ITER_STOP;
	s->slot[i] = slot;
	s->score[i] = nd ? nd->pdata : 0;
	s->n = i + 1;
	return EVICT_ITER_CONTINUE;
}

struct evict_pick {
	struct evict_sample *s;
	struct evict_ctx *ctx;
	__u32 best;
	__u32 bscore;
};

static long evict_pick_scan_cb(__u64 i, void *arg)
{
	struct evict_pick *p = arg;
	__u32 j = i & (EVICT_SAMPLES - 1);

	if (p->s->slot[j] == EVICT_NIL)
		return 0;
	if (evict_loop_var(p->best) == EVICT_NIL || p->s->score[j] < evict_loop_var(p->bscore)) {
		p->best = j;
		p->bscore = p->s->score[j];
	}
	return 0;
}

/* One proposal: the lowest score not taken yet (taken ones are marked by a
 * slot of EVICT_NIL); ties go to the first sampled. */
static long evict_pick_cb(__u64 k, void *arg)
{
	struct evict_pick *p = arg;
	__u32 b;

	p->best = EVICT_NIL;
	bpf_loop(p->s->n, evict_pick_scan_cb, p, 0);
	b = p->best;
	if (b >= EVICT_SAMPLES)
		return 1;
	if (evict_propose(p->ctx, p->s->slot[b]))
		return 1;
	p->s->slot[b] = EVICT_NIL;
	return 0;
}

/* Proposes up to want of the sample's entries, lowest score first (a
 * selection in two bounded loops: at most EVICT_SAMPLES^2 steps). */
static __always_inline void evict_propose_lowest(struct evict_ctx *ctx, struct evict_sample *s, __u32 want)
{
	struct evict_pick p = { .s = s, .ctx = ctx, .best = EVICT_NIL };

	bpf_loop(want < s->n ? want : s->n, evict_pick_cb, &p, 0);
}

#endif /* CISTERN_EVICT_CANDIDATES_BPF_H */
