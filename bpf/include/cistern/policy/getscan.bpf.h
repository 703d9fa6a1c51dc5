/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/getscan.bpf.h - the get-scan eviction policy on cistern/evict.bpf.h.
 *
 * GET-SCAN (cachebpf, section 5.1.5): an application tells the policy which
 * threads or processes scan. Entries they insert go to the scan list, all
 * others to the get list; victims come from the scan list first and from
 * the get list only when it is empty. Each list runs approximate LFU as
 * lfu.bpf.h does: a per-list hand samples EVICT_SAMPLES entries, and the nr
 * lowest hit counts (pdata, saturating; ties: the first walked) are
 * proposed. The get list's hand goes round it; the scan list's hand starts
 * at its oldest end at every evict(): a scan reads each entry once, and its
 * newest entries are readahead not read yet.
 *
 * A scan entry that a point read (not a scanner's) reads again moves to
 * the get list: what a scan brought in and a GET then wants is the GETs'.
 *
 * Who inserts: the driver writes getscan_actor (tgid << 32 | tid) before a
 * request; an entry is a scan entry when its tid or tgid is a key of
 * getscan_scan_ids, or when its request carries EVICT_REQ_SCAN (the
 * page-cache agent's scan detection: a folio added by a thread whose
 * latest read was large; auto's shadow: a page of such a read). The
 * page-cache agent sets the actor per event; replay leaves it as the
 * caller last set it (0: nobody scans).
 *
 * Built with GS_SCAN_ONLY (bpf/pagecache/pc_scanonly.bpf.c), it proposes
 * scan entries only, and only while the scan list holds more than
 * gs_scan_keep pages: the get list is kept but never walked.
 *
 * Included by the stubs bpf/evict/getscan.bpf.c (replay, Kerby-KV) and
 * bpf/pagecache/pc_getscan.bpf.c (the page-cache agent), and
 * pc_scanonly.bpf.c (GS_SCAN_ONLY), after vmlinux.h; its row in
 * evict/registry.go is "get-scan".
 */
#ifndef CISTERN_POLICY_GETSCAN_BPF_H
#define CISTERN_POLICY_GETSCAN_BPF_H

#include "cistern/evict.bpf.h"

#define GS_MAX_SCANNERS 64

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GS_MAX_SCANNERS);
	__type(key, __u32);
	__type(value, __u8);
} getscan_scan_ids SEC(".maps");

__u64 getscan_actor;

/* Not static: clang would narrow them and drop the verifier's bounds. */
__u32 gs_get_q, gs_scan_q;
__u32 gs_hand[2] = { EVICT_NIL, EVICT_NIL }; /* [0] get, [1] scan */
/* GS_SCAN_ONLY: pages on the scan list, and how many of them are never
 * proposed (1/16 of the slots; the page-cache agent has a slot per page of
 * the cgroup). Nothing else absorbs the evictions there, so without a
 * floor every scan folio went as soon as it was added, and a scanner that
 * reads a page again soon after (RocksDB's iterator does: dropping what it
 * had read, by 512 KiB behind it, cut its rate 12-fold) read it from the
 * disk again. Checked per evict(): the page-cache agent asks for one
 * victim at a time. */
#ifdef GS_SCAN_ONLY
__u64 gs_scan_pages, gs_scan_keep;
#endif

static __always_inline __u32 qid(__u32 q)
{
	asm volatile("%0 &= 7" : "+r"(q));
	return q;
}

EVICT_ITERATOR(sample_iter, evict_sample_pdata)

static int evict_policy_init(void)
{
	int g = evict_list_create(), s = evict_list_create();

	if (g < 0 || s < 0)
		return -EVICT_ENOSPC;
	gs_get_q = g;
	gs_scan_q = s;
#ifdef GS_SCAN_ONLY
	gs_scan_pages = 0;
	gs_scan_keep = evict_capacity / 16;
#endif
	gs_hand[0] = gs_hand[1] = EVICT_NIL;
	return 0;
}

static __always_inline int gs_is_scan(void)
{
	__u32 tid = (__u32)getscan_actor, tgid = getscan_actor >> 32;

	if (evict_req_flags & EVICT_REQ_SCAN)
		return 1;
	if (!getscan_actor)
		return 0;
	return bpf_map_lookup_elem(&getscan_scan_ids, &tid) ||
	       bpf_map_lookup_elem(&getscan_scan_ids, &tgid);
}

#ifdef GS_SCAN_ONLY
static __always_inline __u32 gs_size(__u32 slot)
{
	struct evict_entry *e = evict_entry(slot);

	return e ? e->size : 0;
}
#endif

static void evict_policy_added(__u32 slot)
{
	int scan = gs_is_scan();

	evict_list_add_head(qid(scan ? gs_scan_q : gs_get_q), slot);
#ifdef GS_SCAN_ONLY
	if (scan)
		gs_scan_pages += gs_size(slot);
#endif
}

/* A scan entry read again by a point read (no scanner's) is a get entry
 * from then on: a page a scanner brought in and a GET then wants (a value
 * on a block the scan read, or the GET process's own warm-up, whose 1 MiB
 * reads look like a scan's) is the GETs', not the scan's. */
static void evict_policy_accessed(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (!n)
		return;
	if (n->pdata < 0xffffffffu)
		n->pdata++;
	if (n->list != gs_scan_q || gs_is_scan())
		return;
	if (slot == gs_hand[1])
		gs_hand[1] = evict_prev(slot);
#ifdef GS_SCAN_ONLY
	{
		__u32 sz = gs_size(slot);

		gs_scan_pages -= sz < gs_scan_pages ? sz : gs_scan_pages;
	}
#endif
	evict_list_move_head(qid(gs_get_q), slot);
}

static void evict_policy_removed(__u32 slot)
{
#ifdef GS_SCAN_ONLY
	struct evict_node *n = evict_node(slot);

	if (n && n->list == gs_scan_q) {
		__u32 sz = gs_size(slot);

		gs_scan_pages -= sz < gs_scan_pages ? sz : gs_scan_pages;
	}
#endif
	if (slot == gs_hand[0])
		gs_hand[0] = evict_prev(slot);
	if (slot == gs_hand[1])
		gs_hand[1] = evict_prev(slot);
}

/* Entries of each list sampled in this evict(). Globals, not the loop's
 * stack: a map value is an unknown number to the verifier at every read, so
 * 6.12's callback verification converges instead of following each count
 * (on the stack, GET-SCAN in bytes ran past 1M instructions there). */
__u32 gs_walked[2];

struct gs_round {
	struct evict_ctx *ctx;
};

/* Proposes up to the still missing candidates from list h (0 get, 1 scan):
 * one sample of up to EVICT_SAMPLES entries from its hand. A list is walked
 * at most once round per evict(), so nothing is proposed twice. Returns
 * how many entries it sampled. */
static __noinline int gs_evict_from(struct gs_round *r, __u32 h)
{
	struct evict_sample s = {};
	struct evict_iter it = { .data = &s };
	struct evict_ctx *ctx;
	__u32 q, len, max, want, walked;

	if (!r || !r->ctx)
		return 0;
	ctx = r->ctx;
	h &= 1;
	q = qid(h ? gs_scan_q : gs_get_q);
	len = evict_list_len(q);
#ifdef GS_SCAN_ONLY
	if (h && gs_scan_pages <= gs_scan_keep)
		return 0;
#endif
	walked = gs_walked[h];
	if (walked >= len || ctx->n >= ctx->nr)
		return 0;
	max = len - walked;
	if (max > EVICT_SAMPLES)
		max = EVICT_SAMPLES;
	it.ctx = ctx;
	evict_list_iterate(&it, q, gs_hand[h], EVICT_TOWARDS_HEAD, 1, max, sample_iter);
	gs_hand[h] = it.cur;
	gs_walked[h] = walked + s.n;
	want = ctx->nr - ctx->n;
	evict_propose_lowest(ctx, &s, want);
	return s.n;
}

/* Samples until nr are proposed: the scan list until all of it was
 * sampled, then the get list. */
static long round_cb(__u64 i, void *arg)
{
	struct gs_round *r = arg;

	if (gs_evict_from(r, 1))
		return r->ctx->n >= r->ctx->nr;
#ifndef GS_SCAN_ONLY
	if (gs_evict_from(r, 0))
		return r->ctx->n >= r->ctx->nr;
#endif
	return 1;
}

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct gs_round r = { .ctx = ctx };

	gs_hand[1] = EVICT_NIL; /* the scan list: from its oldest end */
	gs_walked[0] = gs_walked[1] = 0;
	bpf_loop(EVICT_MAX_CANDIDATES, round_cb, &r, 0);
}

#endif /* CISTERN_POLICY_GETSCAN_BPF_H */
