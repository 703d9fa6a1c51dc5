/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/policy/lhd.bpf.h - the lhd eviction policy on cistern/evict.bpf.h.
 *
 * LHD, least hit density (Beckmann, Chen, Cidon, NSDI'18), in integer fixed
 * point. An entry's class is how recently it was hit before (the sum of its
 * last two hit ages, log-scaled into LHD_CLASSES); its age is the number of
 * accesses since its last one, coarsened by lhd_shift. Hits and evictions
 * are counted per (class, age) on the hot path. evict samples LHD_SAMPLES
 * random slots and proposes the one with the lowest hit density of its
 * (class, age), divided by its size when the cache counts bytes.
 *
 * The density table is recomputed off the hot path: the program
 * evict_periodic (package evict runs it between replay batches) decays the
 * counts by 9/10 and rebuilds every class's table once lhd_reconf_every
 * accesses have passed. density(c, a) = hits at ages >= a / expected
 * remaining lifetime from a (the sum over later ages of all events), as in
 * the paper. Until the first rebuild the table is libCacheSim's start,
 * (c + 1) / (a + 1).
 *
 * Not from libCacheSim (see docs/eviction.md): no explorers and no extra
 * "recently admitted" candidates; random slots come from a deterministic
 * xorshift so replays repeat; LHD_AGES is 1024 (libCacheSim: 20000) and the
 * coarsening is fixed at init so the ages span 100 times the capacity in
 * accesses; libCacheSim rebuilds every 2^20 accesses, here every 2^16.
 *
 * Included by the stubs bpf/evict/lhd.bpf.c (replay, Kerby-KV) and
 * bpf/pagecache/pc_lhd.bpf.c (the page-cache agent), after vmlinux.h; its
 * row in evict/registry.go is "lhd".
 */
#ifndef CISTERN_POLICY_LHD_BPF_H
#define CISTERN_POLICY_LHD_BPF_H

#include "cistern/evict.bpf.h"

#define LHD_CLASSES 16
#define LHD_AGES 1024                        /* power of 2 */
#define LHD_CELLS (LHD_CLASSES * LHD_AGES)
#define LHD_SAMPLES 32
#define LHD_ONE 16                           /* one event in the counts */
#define LHD_DSHIFT 27                        /* density fixed point */

const volatile __u64 lhd_reconf_every = 1 << 16;

/* Slots the samples are drawn from. Replay evicts only once every slot is
 * used, so the whole table; the page-cache agent (pc_lhd.bpf.c) evicts long
 * before its table (sized for the cgroup's limit) fills, and draws from the
 * slots used so far instead, or most samples miss and the fallback evicts. */
#ifndef LHD_SAMPLE_SPAN
#define LHD_SAMPLE_SPAN evict_capacity
#endif

/* Per slot: the entry's access history. */
struct lhd_tag {
	__u32 ts;             /* access count at its last access */
	__u32 last_hit_age;
	__u32 last_last_hit_age;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u32);
	__type(value, struct lhd_tag);
} evict_pslot_lhd SEC(".maps");

__u32 lhd_hits[LHD_CELLS];      /* per (class, age), LHD_ONE per event, decayed */
__u32 lhd_evictions[LHD_CELLS];
__u32 lhd_density[LHD_CELLS];   /* hit density << LHD_DSHIFT */
__u32 lhd_now;                  /* accesses so far */
__u32 lhd_shift;                /* age coarsening */
__u32 lhd_last_reconf;
__u64 lhd_reconfigurations;
__u64 lhd_rand = 0x9e3779b97f4a7c15ull;

/* Index of (class, age) in the tables, masked where the verifier sees it
 * (clang folds a plain mask away when it thinks the value is in range). */
static __always_inline __u32 cell(__u32 c, __u32 a)
{
	__u32 j = c * LHD_AGES + a;

	asm volatile("%0 &= %1" : "+r"(j) : "i"(LHD_CELLS - 1));
	return j;
}

static __always_inline struct lhd_tag *tag(__u32 slot)
{
	if (slot >= evict_capacity)
		return NULL;
	return bpf_map_lookup_elem(&evict_pslot_lhd, &slot);
}

static __always_inline __u32 age_of(struct lhd_tag *t)
{
	__u32 a = (lhd_now - t->ts) >> (lhd_shift & 31);

	return a < LHD_AGES - 1 ? a : LHD_AGES - 1;
}

/* How many doublings take the summed hit age to LHD_AGES: recent hitters
 * get high classes, new entries (never hit) class 0. */
static __always_inline __u32 class_of(struct lhd_tag *t)
{
	__u32 age = t->last_hit_age + t->last_last_hit_age, c = 0;

	if (age == 0)
		return LHD_CLASSES - 1;
	for (int i = 0; i < LHD_CLASSES - 1; i++) {
		if (age >= LHD_AGES)
			break;
		age <<= 1;
		c++;
	}
	return c;
}

static __always_inline __u32 next_rand(void)
{
	__u64 x = lhd_rand;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	lhd_rand = x;
	return x >> 32;
}

static int evict_policy_init(void)
{
	/* Ages span about 100 times the capacity, in accesses. */
	__u64 want = (__u64)evict_capacity * 100 / LHD_AGES;
	__u32 s = 0;

	for (int i = 0; i < 31; i++) {
		if ((1ull << s) >= want)
			break;
		s++;
	}
	lhd_shift = s;
	for (__u32 c = 0; c < LHD_CLASSES; c++)
		for (__u32 a = 0; a < LHD_AGES; a++)
			lhd_density[cell(c, a)] = ((c + 1) << LHD_DSHIFT) / (a + 1);
	return 0;
}

static void evict_policy_added(__u32 slot)
{
	struct lhd_tag *t = tag(slot);

	if (!t)
		return;
	t->ts = lhd_now++;
	t->last_hit_age = 0;
	t->last_last_hit_age = LHD_AGES;
}

static void evict_policy_accessed(__u32 slot)
{
	struct lhd_tag *t = tag(slot);
	__u32 a;

	if (!t)
		return;
	a = age_of(t);
	lhd_hits[cell(class_of(t), a)] += LHD_ONE;
	t->last_last_hit_age = t->last_hit_age;
	t->last_hit_age = a;
	t->ts = lhd_now++;
}

static void evict_policy_removed(__u32 slot)
{
	struct lhd_tag *t = tag(slot);

	if (t)
		lhd_evictions[cell(class_of(t), age_of(t))] += LHD_ONE;
}

/* Hit density of slot, scaled; larger is more worth keeping. Entries past
 * the last age go first, as in libCacheSim. */
static __always_inline __u64 rank_of(__u32 slot, struct lhd_tag *t)
{
	struct evict_entry *e;
	__u32 a = age_of(t);
	__u64 d;

	if (a == LHD_AGES - 1)
		return 0;
	d = (__u64)lhd_density[cell(class_of(t), a)] << 16;
	if (evict_byte_capacity && (e = evict_entry(slot)) && e->size > 1)
		d /= e->size;
	return d;
}

struct lhd_pick {
	__u32 best;
	__u32 pad;
	__u64 brank;
};

static long sample_cb(__u64 i, void *arg)
{
	struct lhd_pick *p = arg;
	__u32 span = LHD_SAMPLE_SPAN, s;
	struct lhd_tag *t;
	__u64 r;

	if (!span)
		return 1;
	s = next_rand() % span;
	if (!evict_resident(s) || !(t = tag(s)))
		return 0;
	r = rank_of(s, t);
	/* evict_loop_var: state from the previous sample (evict.bpf.h). */
	if (evict_loop_var(p->best) == EVICT_NIL || r < evict_loop_var(p->brank)) {
		p->best = s;
		p->brank = r;
	}
	return 0;
}

struct lhd_propose {
	struct evict_ctx *ctx; /* bpf_loop wants a stack pointer */
};

static long propose_cb(__u64 k, void *arg)
{
	struct evict_ctx *ctx = ((struct lhd_propose *)arg)->ctx;
	struct lhd_pick p = { .best = EVICT_NIL };

	bpf_loop(LHD_SAMPLES, sample_cb, &p, 0);
	if (p.best == EVICT_NIL)
		return 1; /* nothing resident found: the fallback completes */
	return evict_propose(ctx, p.best);
}

static void evict_policy_evict(struct evict_ctx *ctx)
{
	struct lhd_propose pr = { .ctx = ctx };

	bpf_loop(ctx->nr, propose_cb, &pr, 0);
}

/* ---- reconfiguration, off the hot path ---- */

struct lhd_model {
	__u32 c;
	__u32 pad;
	__u64 hits, events, lifetime;
};

static long decay_cb(__u64 i, void *arg)
{
	__u32 j = i & (LHD_CELLS - 1);

	lhd_hits[j] = (__u64)lhd_hits[j] * 9 / 10;
	lhd_evictions[j] = (__u64)lhd_evictions[j] * 9 / 10;
	return 0;
}

/* Walks one class from the oldest age down, accumulating the hits and the
 * unconditioned lifetime of everything at or beyond each age. */
static long model_age_cb(__u64 i, void *arg)
{
	struct lhd_model *m = arg;
	__u32 a = LHD_AGES - 1 - (__u32)i, j = cell(m->c, a);

	m->hits += lhd_hits[j];
	m->events += lhd_hits[j] + lhd_evictions[j];
	m->lifetime += m->events;
	lhd_density[j] = m->lifetime ? (__u32)((m->hits << LHD_DSHIFT) / m->lifetime) : 0;
	return 0;
}

static long model_class_cb(__u64 c, void *arg)
{
	struct lhd_model m = { .c = (__u32)c };

	bpf_loop(LHD_AGES, model_age_cb, &m, 0);
	return 0;
}

/* Run between batches: rebuilds the density table once lhd_reconf_every
 * accesses have passed since the last rebuild. */
CISTERN_CALL(evict_periodic, struct evict_run_args, a)
{
	a->ret = 0;
	if (!evict_initialized || lhd_now - lhd_last_reconf < lhd_reconf_every)
		return;
	lhd_last_reconf = lhd_now;
	bpf_loop(LHD_CELLS, decay_cb, NULL, 0);
	bpf_loop(LHD_CLASSES, model_class_cb, NULL, 0);
	lhd_reconfigurations++;
	a->n = 1;
}

#endif /* CISTERN_POLICY_LHD_BPF_H */
