// SPDX-License-Identifier: GPL-2.0
/* Approximate LFU by batch scoring: each entry counts its hits (pdata,
 * saturating). To evict, a hand walks LFU_SAMPLES entries of the insertion
 * list (from the tail towards the head, wrapping), scores them by count and
 * proposes the nr lowest (ties: the first one walked). The hand then rests
 * on the next entry, so successive evictions sample the whole cache in turn
 * (like a CLOCK hand) instead of rescoring the same oldest entries.
 * With at most LFU_SAMPLES entries resident this is exact LFU; beyond that
 * a victim is only the least frequent of its sample. Counts never age. */
#include "vmlinux.h"
#include "cistern/evict.bpf.h"

#define LFU_SAMPLES 8

/* Not static: clang would narrow it and drop the verifier's bounds. */
__u32 lfu_q;
static __u32 hand = EVICT_NIL;

static __always_inline __u32 qid(__u32 q)
{
	asm volatile("%0 &= 7" : "+r"(q));
	return q;
}

struct lfu_sample {
	__u32 n;
	__u32 slot[LFU_SAMPLES];
	__u32 score[LFU_SAMPLES];
};

static long sample_cb(__u32 slot, struct evict_iter *it)
{
	struct lfu_sample *s = it->data;
	struct evict_node *nd = evict_node(slot);
	__u32 i = s->n;

	if (i >= LFU_SAMPLES)
		return EVICT_ITER_STOP;
	s->slot[i] = slot;
	s->score[i] = nd ? nd->pdata : 0;
	s->n = i + 1;
	return EVICT_ITER_CONTINUE;
}
EVICT_ITERATOR(sample_iter, sample_cb)

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

struct lfu_pick {
	struct lfu_sample *s;
	struct evict_ctx *ctx;
	__u32 best;
	__u32 bscore;
};

static long scan_cb(__u64 i, void *arg)
{
	struct lfu_pick *p = arg;
	__u32 j = i & (LFU_SAMPLES - 1);

	if (p->s->slot[j] == EVICT_NIL)
		return 0;
	if (p->best == EVICT_NIL || p->s->score[j] < p->bscore) {
		p->best = j;
		p->bscore = p->s->score[j];
	}
	return 0;
}

/* One proposal: the lowest score not taken yet (taken ones are marked by
 * a slot of EVICT_NIL); ties go to the first walked. */
static long pick_cb(__u64 k, void *arg)
{
	struct lfu_pick *p = arg;
	__u32 b;

	p->best = EVICT_NIL;
	bpf_loop(p->s->n, scan_cb, p, 0);
	b = p->best;
	if (b >= LFU_SAMPLES)
		return 1;
	if (evict_propose(p->ctx, p->s->slot[b]))
		return 1;
	p->s->slot[b] = EVICT_NIL;
	return 0;
}

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct lfu_sample s = {};
	struct evict_iter it = { .ctx = ctx, .data = &s };
	struct lfu_pick p = { .s = &s, .ctx = ctx, .best = EVICT_NIL };
	__u32 len = evict_list_len(qid(lfu_q)), max = len < LFU_SAMPLES ? len : LFU_SAMPLES;

	evict_list_iterate(&it, qid(lfu_q), hand, EVICT_TOWARDS_HEAD, 1, max, sample_iter);
	hand = it.cur;
	bpf_loop(ctx->nr < s.n ? ctx->nr : s.n, pick_cb, &p, 0);
}
