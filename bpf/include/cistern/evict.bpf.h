/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict.bpf.h - eviction policies as BPF functions over eviction
 * lists kept in maps (after cachebpf: policy functions, eviction lists, a
 * registry of valid entries and a fallback), and a cache that runs them.
 *
 * MODEL
 *   The cache holds up to evict_capacity entries. Each entry lives in a slot
 *   (0 .. evict_capacity-1); a policy only ever sees slot numbers. The cache
 *   calls five policy functions, which every policy defines:
 *
 *     int  evict_policy_init(void)           once, before anything else:
 *                                            create lists (evict_list_create)
 *     void evict_policy_added(__u32 slot)    a new entry (node pdata is 0)
 *     void evict_policy_accessed(__u32 slot) a hit on a resident entry
 *     void evict_policy_removed(__u32 slot)  the entry is going away (still
 *                                            linked: its neighbours are valid);
 *                                            the cache unlinks it afterwards
 *     void evict_policy_evict(struct evict_ctx *ctx)
 *                                            propose ctx->nr victims: write
 *                                            slots to ctx->cand[], count in ctx->n
 *                                            (evict_propose does both)
 *
 *   Proposing does not remove anything: the cache checks each proposal
 *   against the registry (in range, resident; a slot proposed twice is not
 *   resident the second time), removes the valid ones (calling removed()),
 *   and, when fewer than nr were valid, completes the eviction with the
 *   built-in fallback (a round-robin hand over the slots). Proposals beyond
 *   EVICT_MAX_CANDIDATES are ignored. Every case is counted in evict_stats:
 *   PROPOSED, INVALID, SHORT, FALLBACKS, FALLBACK_EVICTIONS. A policy can
 *   therefore be wrong, but never unsafe: it cannot evict what is not there,
 *   and the cache always makes room. Defining EVICT_NO_FALLBACK before this
 *   header drops the fallback: for a policy that may decline because
 *   someone else evicts too (the page-cache agent's scan-only, where the
 *   kernel reclaims what the policy leaves); an insertion then fails when
 *   no slot is free.
 *
 * EVICTION LISTS
 *   Doubly-linked lists threaded through the evict_nodes ARRAY, one node per
 *   slot, so finding, moving and deleting an entry is O(1) and needs no
 *   allocation (bpf_list/bpf_rbtree need kptrs and locks that cilium/ebpf and
 *   the kernels Cistern supports do not give us here). Up to EVICT_MAX_LISTS
 *   lists; an entry is on at most one. "head" is the newest end by
 *   convention.
 *     int   evict_list_create(void)                 -> list id or -ENOSPC
 *     int   evict_list_add_head(list, slot)         add, or move if on a list
 *     int   evict_list_add_tail(list, slot)
 *     int   evict_list_move_head/tail(list, slot)   same as add_*
 *     int   evict_list_del(slot)
 *     __u32 evict_list_head(list), evict_list_tail(list), evict_list_len(list)
 *     __u32 evict_next(slot) (towards tail), evict_prev(slot) (towards head)
 *     struct evict_node *evict_node(slot)           pdata is the policy's word
 *   Iteration with a bounded callback (bpf_loop):
 *     static long my_cb(__u32 slot, struct evict_iter *it) { ...; return 0; }
 *     EVICT_ITERATOR(my_iter, my_cb)           defines the bpf_loop callback
 *     struct evict_iter it = { .ctx = ctx, .data = &mine };
 *     evict_list_iterate(&it, list, start, EVICT_TOWARDS_HEAD, wrap, max, my_iter);
 *   my_cb returns EVICT_ITER_CONTINUE or EVICT_ITER_STOP; it may move or
 *   delete slot (the next slot was read before the call). With wrap set,
 *   walking off one end continues at the other. start EVICT_NIL means the
 *   end the walk starts from (tail when walking towards the head).
 *   Batch scoring: evict_sample_pdata fills a struct evict_sample (up to
 *   EVICT_SAMPLES entries scored by pdata) during a walk, and
 *   evict_propose_lowest(ctx, &sample, want) proposes the lowest scores.
 *
 * WRITING A POLICY (cistern/policy/lru.bpf.h is the shortest complete one;
 * bpf/examples/evictbig.bpf.c and examples/evictbig show one loaded from
 * your own package with evict.OpenSpec)
 *   #include "vmlinux.h"
 *   #include "cistern/evict.bpf.h"
 *   static __u32 q;
 *   static int evict_policy_init(void) { int l = evict_list_create(); if (l < 0) return l; q = l; return 0; }
 *   static void evict_policy_added(__u32 s)    { evict_list_add_head(q, s); }
 *   static void evict_policy_accessed(__u32 s) { evict_list_move_head(q, s); }
 *   static void evict_policy_removed(__u32 s)  { }
 *   static void evict_policy_evict(struct evict_ctx *ctx) { ... evict_propose(ctx, s) ... }
 *   Policy state goes in globals or your own maps. The header defines the
 *   programs evict_init, evict_replay and evict_drain, which user space
 *   calls through BPF_PROG_TEST_RUN (XDP, see cistern/call.bpf.h; package
 *   evict drives them).
 *
 * SIZES
 *   Without a budget the cache is full when its evict_capacity slots are.
 *   With evict_byte_capacity (package evict: Config.Bytes) it also keeps the
 *   sum of its entries' sizes (evict_req.size: bytes, pool blocks, ...) at
 *   or below the budget, asking for one victim at a time until a new entry
 *   fits; an entry larger than the budget is not admitted (too_big).
 *
 * PERIODIC WORK
 *   A policy may define its own
 *     CISTERN_CALL(evict_periodic, struct evict_run_args, a) { ... }
 *   for work that must stay off the hot path (LHD rebuilds its density
 *   table there). Package evict runs it after every replay batch and after
 *   every drain (Cache.Periodic).
 *
 * SHARING THE CACHE (evict_drain)
 *   Programs of another object (Kerby-KV's XDP and TC programs, on every
 *   CPU) do not call the policy: they push struct evict_event on
 *   evict_events (a QUEUE map they share: a hit, a fill of size units, a
 *   removal). The program evict_drain, called by one agent thread,
 *   applies them in order and pushes the keys of the victims it evicts for
 *   fills onto evict_victims, for the owner to delete. The single writer
 *   stays single; the owner keeps a reserve so fills between drains fit.
 *
 * MAPS (sized by package evict from Config.Capacity; defaults load as is)
 *   evict_nodes    ARRAY[capacity] struct evict_node
 *   evict_entries  ARRAY[capacity] struct evict_entry  the registry
 *   evict_index    HASH[capacity]  key -> slot         cache lookups
 *   evict_free     ARRAY[capacity] __u32               stack of free slots
 *   evict_ctxs     PERCPU_ARRAY[1] struct evict_ctx
 *   evict_batches  ARRAY[1] struct evict_batch         replay input/output
 *   evict_stats    PERCPU_ARRAY[EVICT_STAT_MAX] __u64
 *   evict_events, evict_victims  QUEUE[EVICT_QUEUE_LEN] struct evict_event
 *   .rodata evict_capacity, evict_byte_capacity (frozen: constants to the verifier)
 *
 * SAFETY AND CONCURRENCY
 *   Every slot is checked against evict_capacity before a lookup, list ids
 *   against EVICT_MAX_LISTS, candidate and batch indices are masked, and
 *   every walk is a bpf_loop with a bound. The cache is single-writer: run
 *   its programs from one thread at a time (replay does; others share it
 *   through evict_events and evict_drain).
 *
 * BPF_LOOP CALLBACKS BEFORE LINUX 6.7
 *   Until 6.7 the verifier checks a bpf_loop callback as if it ran once, from
 *   the state its caller left, and a privileged load then removes what that
 *   one run did not reach as dead code (branches are hard-wired). State a
 *   callback carries from one iteration to the next and branches on must
 *   therefore be unknown to the verifier where the callback reads it, or
 *   what later iterations do is gone: on 6.1 "best == EVICT_NIL || score <
 *   best_score", seen once with best == EVICT_NIL, became "always take the
 *   new one", and LFU proposed the newest entry instead of the least used.
 *   Read such state through evict_loop_var(), as the callbacks here do:
 *     __u32 best = evict_loop_var(p->best);
 *   It is the same value XORed with evict_loop_zero, a global that is
 *   always 0 but lives in .bss (never write it), so the verifier cannot
 *   know it: a load and an XOR.
 */
#ifndef CISTERN_EVICT_BPF_H
#define CISTERN_EVICT_BPF_H

#include <bpf/bpf_helpers.h>
#include "cistern/evict.h"
#include "cistern/call.bpf.h"

#define EVICT_EINVAL 22
#define EVICT_ENOENT 2
#define EVICT_ENOSPC 28

#define EVICT_TOWARDS_HEAD 0
#define EVICT_TOWARDS_TAIL 1
#define EVICT_ITER_CONTINUE 0
#define EVICT_ITER_STOP 1

const volatile __u32 evict_capacity = EVICT_DEFAULT_SLOTS;
/* 0: the cache is full when its slots are. Otherwise it also keeps the sum of
 * its entries' sizes (evict_req.size: bytes, blocks, ...) at or below this,
 * evicting one victim at a time until a new entry fits (libCacheSim's rule);
 * an entry larger than the whole budget is not admitted (EVICT_STAT_TOO_BIG). */
const volatile __u64 evict_byte_capacity = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u32);
	__type(value, struct evict_node);
} evict_nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u32);
	__type(value, struct evict_entry);
} evict_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u64);
	__type(value, __u32);
} evict_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} evict_free SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct evict_ctx);
} evict_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct evict_batch);
} evict_batches SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EVICT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} evict_stats SEC(".maps");

/* Events from other programs (for instance Kerby-KV's XDP and TC programs,
 * on every CPU) and the victims evict_drain chose, for the owner to delete.
 * A loader shares them with the owner's maps (MapReplacements). */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, EVICT_QUEUE_LEN);
	__type(value, struct evict_event);
} evict_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, EVICT_QUEUE_LEN);
	__type(value, struct evict_event);
} evict_victims SEC(".maps");

/* Cache state (single writer). */
struct evict_list evict_lists[EVICT_MAX_LISTS];
__u32 evict_next_unused;   /* slots never used yet: [evict_next_unused, capacity) */
__u32 evict_free_top;      /* entries on the evict_free stack */
__u32 evict_fallback_hand; /* next slot the fallback looks at */
__u32 evict_initialized;
__u64 evict_used_bytes;    /* sum of resident entries' sizes */
__u32 evict_report_victims; /* evict_drain: push removed keys to evict_victims */
volatile __u64 evict_loop_zero; /* always 0, unknown to the verifier: evict_loop_var */

/* x, which the verifier no longer knows: for loop-carried state a bpf_loop
 * callback branches on (see BPF_LOOP CALLBACKS BEFORE LINUX 6.7 above). */
#define evict_loop_var(x) ((__typeof__(x))((x) ^ evict_loop_zero))

/* The policy's functions: defined by the file that includes this header. */
static int evict_policy_init(void);
static void evict_policy_added(__u32 slot);
static void evict_policy_accessed(__u32 slot);
static void evict_policy_removed(__u32 slot);
static void evict_policy_evict(struct evict_ctx *ctx);

static __always_inline void evict_stat_add(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&evict_stats, &stat);

	if (v)
		__sync_fetch_and_add(v, n);
}

/* ---- nodes and the registry ---- */

static __always_inline struct evict_node *evict_node(__u32 slot)
{
	if (slot >= evict_capacity)
		return NULL;
	return bpf_map_lookup_elem(&evict_nodes, &slot);
}

static __always_inline struct evict_entry *evict_entry(__u32 slot)
{
	if (slot >= evict_capacity)
		return NULL;
	return bpf_map_lookup_elem(&evict_entries, &slot);
}

/* 1 when slot holds an entry: what the cache checks every proposal against. */
static __always_inline int evict_resident(__u32 slot)
{
	struct evict_entry *e = evict_entry(slot);

	return e && e->resident;
}

static __always_inline __u32 evict_next(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	return n ? n->next : EVICT_NIL;
}

static __always_inline __u32 evict_prev(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	return n ? n->prev : EVICT_NIL;
}

/* ---- lists ---- */

static __always_inline struct evict_list *evict_list_get(__u32 list)
{
	if (list >= EVICT_MAX_LISTS)
		return NULL;
	return &evict_lists[list & (EVICT_MAX_LISTS - 1)];
}

static __always_inline int evict_list_create(void)
{
	for (int i = 0; i < EVICT_MAX_LISTS; i++) {
		struct evict_list *l = &evict_lists[i];

		if (!l->used) {
			l->used = 1;
			l->head = l->tail = EVICT_NIL;
			l->len = 0;
			return i;
		}
	}
	return -EVICT_ENOSPC;
}

static __always_inline __u32 evict_list_head(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->head : EVICT_NIL;
}

static __always_inline __u32 evict_list_tail(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->tail : EVICT_NIL;
}

static __always_inline __u32 evict_list_len(__u32 list)
{
	struct evict_list *l = evict_list_get(list);

	return l ? l->len : 0;
}

/* Takes n (the node of slot) off its list, if it is on one. */
static __always_inline void evict_unlink(struct evict_node *n)
{
	struct evict_list *l = evict_list_get(n->list);
	struct evict_node *p;

	if (!l)
		return;
	if (n->prev != EVICT_NIL) {
		p = evict_node(n->prev);
		if (p)
			p->next = n->next;
	} else {
		l->head = n->next;
	}
	if (n->next != EVICT_NIL) {
		p = evict_node(n->next);
		if (p)
			p->prev = n->prev;
	} else {
		l->tail = n->prev;
	}
	if (l->len)
		l->len--;
	n->list = EVICT_NIL;
	n->prev = n->next = EVICT_NIL;
}

static __always_inline int evict_list_add(__u32 list, __u32 slot, int at_tail)
{
	struct evict_list *l = evict_list_get(list);
	struct evict_node *n = evict_node(slot), *p;

	if (!l || !n || !l->used)
		return -EVICT_EINVAL;
	if (!evict_resident(slot))
		return -EVICT_ENOENT;
	evict_unlink(n);
	n->list = list;
	if (at_tail) {
		n->next = EVICT_NIL;
		n->prev = l->tail;
		p = l->tail != EVICT_NIL ? evict_node(l->tail) : NULL;
		if (p)
			p->next = slot;
		else
			l->head = slot;
		l->tail = slot;
	} else {
		n->prev = EVICT_NIL;
		n->next = l->head;
		p = l->head != EVICT_NIL ? evict_node(l->head) : NULL;
		if (p)
			p->prev = slot;
		else
			l->tail = slot;
		l->head = slot;
	}
	l->len++;
	return 0;
}

static __always_inline int evict_list_add_head(__u32 list, __u32 slot) { return evict_list_add(list, slot, 0); }
static __always_inline int evict_list_add_tail(__u32 list, __u32 slot) { return evict_list_add(list, slot, 1); }
static __always_inline int evict_list_move_head(__u32 list, __u32 slot) { return evict_list_add(list, slot, 0); }
static __always_inline int evict_list_move_tail(__u32 list, __u32 slot) { return evict_list_add(list, slot, 1); }

static __always_inline int evict_list_del(__u32 slot)
{
	struct evict_node *n = evict_node(slot);

	if (!n)
		return -EVICT_EINVAL;
	if (n->list == EVICT_NIL)
		return -EVICT_ENOENT;
	evict_unlink(n);
	return 0;
}

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
		evict_policy_accessed(*sp);
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
	evict_policy_added(s);
	return 0;
}

/* ---- Programs user space calls (cistern/call.bpf.h) ---- */

CISTERN_CALL(evict_init, struct evict_run_args, a)
{
	if (evict_initialized) {
		a->ret = 0;
		return;
	}
	for (int i = 0; i < EVICT_MAX_LISTS; i++) {
		evict_lists[i].head = evict_lists[i].tail = EVICT_NIL;
		evict_lists[i].len = evict_lists[i].used = 0;
	}
	evict_initialized = 1;
	a->ret = evict_policy_init();
}

struct evict_replay_loop {
	struct evict_batch *b;
	__u64 hits;
	__u64 bytes;
	__u64 hit_bytes;
};

static long evict_replay_step(__u64 i, void *arg)
{
	struct evict_replay_loop *lp = arg;
	struct evict_req *r = &lp->b->req[i & (EVICT_BATCH - 1)];
	int hit;

	r->evicted = 0;
	r->victim = 0;
	hit = evict_cache_access(r);
	r->hit = hit;
	lp->bytes += r->size;
	if (hit) {
		lp->hits++;
		lp->hit_bytes += r->size;
	}
	return 0;
}

/* Replays evict_batches[0]: req[0..n) in order, writing each outcome back. */
CISTERN_CALL(evict_replay, struct evict_run_args, a)
{
	__u32 zero = 0, n;
	struct evict_batch *b = bpf_map_lookup_elem(&evict_batches, &zero);
	struct evict_replay_loop lp = {};

	if (!b || !evict_initialized) {
		a->ret = -EVICT_EINVAL;
		return;
	}
	n = b->n;
	if (n > EVICT_BATCH)
		n = EVICT_BATCH;
	lp.b = b;
	bpf_loop(n, evict_replay_step, &lp, 0);
	evict_stat_add(EVICT_STAT_REQUESTS, n);
	evict_stat_add(EVICT_STAT_HITS, lp.hits);
	evict_stat_add(EVICT_STAT_MISSES, n - lp.hits);
	evict_stat_add(EVICT_STAT_BYTES, lp.bytes);
	evict_stat_add(EVICT_STAT_HIT_BYTES, lp.hit_bytes);
	a->n = n;
	a->hits = lp.hits;
	a->ret = 0;
}

struct evict_drain_loop {
	__u32 n;
};

static long evict_drain_step(__u64 i, void *arg)
{
	struct evict_drain_loop *lp = arg;
	struct evict_event ev;
	struct evict_req r = {};
	__u32 *sp;

	if (bpf_map_pop_elem(&evict_events, &ev))
		return 1;
	lp->n++;
	sp = bpf_map_lookup_elem(&evict_index, &ev.key);
	switch (ev.op) {
	case EVICT_EV_ACCESS:
		if (sp)
			evict_policy_accessed(*sp);
		break;
	case EVICT_EV_FILL:
		/* Victims of this insertion go to evict_victims. */
		r.key = ev.key;
		r.size = ev.size;
		evict_report_victims = 1;
		evict_cache_access(&r);
		evict_report_victims = 0;
		break;
	case EVICT_EV_REMOVE:
		if (sp)
			evict_remove(*sp, NULL);
		break;
	}
	return 0;
}

/* Applies the queued evict_events in order (at most EVICT_QUEUE_LEN): the
 * cache's single writer when other programs share it. a->n: events applied. */
CISTERN_CALL(evict_drain, struct evict_run_args, a)
{
	struct evict_drain_loop lp = {};

	if (!evict_initialized) {
		a->ret = -EVICT_EINVAL;
		return;
	}
	bpf_loop(EVICT_QUEUE_LEN, evict_drain_step, &lp, 0);
	evict_stat_add(EVICT_STAT_EVENTS, lp.n);
	a->n = lp.n;
	a->ret = 0;
}

char _license[] SEC("license") = "GPL";

#endif
