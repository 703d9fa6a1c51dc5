/* SPDX-License-Identifier: GPL-2.0 */
/* pc_apply: the page-cache agent's side of an eviction policy. Included
 * after a policy's header (cistern/policy/<name>.bpf.h) by its stub
 * bpf/pagecache/pc_<name>.bpf.c, so it runs the very policy code the replay
 * tests check. One call (an XDP program run
 * with BPF_PROG_TEST_RUN, see cistern/call.bpf.h) applies a batch of
 * tracker events in order (added with the inserting thread, removed,
 * accessed), then asks the policy for want victims. Victims leave
 * the policy when proposed: the agent evicts them, and the kernel's delete
 * events for them find nothing (PC_A_DEL_UNKNOWN). */
#ifndef CISTERN_PC_APPLY_BPF_H
#define CISTERN_PC_APPLY_BPF_H

#include "cistern/pagecache.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pc_batch);
} pc_batches SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pc_victims);
} pc_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PC_A_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pc_apply_stats SEC(".maps");

/* 1: the first read of a folio after its insertion is not an access. The
 * tracker reports every buffered read, and the read that brought a folio in
 * (or the first read of a readahead folio) is one of them, so every folio
 * read once would look hit once: to LHD, a scan's pages became recent
 * hitters and the hot set, older, went first; to S3-FIFO, no folio was a
 * one-hit wonder. Set by the agent when every read is reported (with reads
 * sampled, that first read is mostly not reported anyway). */
const volatile __u32 pc_skip_first_read;

/* Per slot: the last read that found the folio, as tid << 32 | read number
 * (struct pc_event's read), so that a folio a read's later page batches
 * report again is not hit again by the same read; PC_FRESH (with
 * pc_skip_first_read) from insertion until the first read. Sized with the
 * policy's slots: package evict resizes evict_pslot_*. */
#define PC_FRESH 1ULL

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EVICT_DEFAULT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} evict_pslot_pcread SEC(".maps");

static __always_inline void pc_stat(__u32 s, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&pc_apply_stats, &s);

	if (v)
		*v += n;
}

/* Takes one victim from the policy (or the fallback) and appends it to out.
 * Global functions are verified once, not at every call site: the policy's
 * evict() is too large to inline twice. */
__noinline int pc_evict_one(struct pc_victims *out)
{
	struct evict_req r = {};
	struct evict_entry *e;
	__u32 top, *slot, n;

	if (!out)
		return -1;
	if (evict_make_room(1, &r) != 1)
		return -1;
	/* evict_remove pushed the victim's slot on the free stack: its entry
	 * still holds the size. */
	top = evict_free_top - 1;
	slot = bpf_map_lookup_elem(&evict_free, &top);
	e = slot ? evict_entry(*slot) : NULL;
	n = out->n;
	if (n >= PC_MAX_VICTIMS)
		return -1;
	out->v[n & (PC_MAX_VICTIMS - 1)].key = r.victim;
	out->v[n & (PC_MAX_VICTIMS - 1)].pages = e ? e->size : 1;
	out->pages += e ? e->size : 1;
	out->n = n + 1;
	pc_stat(PC_A_VICTIMS, 1);
	return 0;
}

/* Inserts key (size pages); the caller made sure a slot is free. */
__noinline int pc_insert(__u64 key, __u32 size)
{
	struct evict_req r = { .key = key, .size = size };

	evict_cache_access(&r);
	return 0;
}

struct pc_loop {
	struct pc_batch *b;
	struct pc_victims *out;
	__u32 want; /* pages */
};

struct pc_acc_loop {
	__u64 key;
	__u64 read; /* tid << 32 | read number; 0: none (each event its own read) */
	__u32 hits;
};

static long pc_acc_step(__u64 i, void *arg)
{
	struct pc_acc_loop *l = arg;
	__u64 k = l->key + i, *last;
	__u32 *sp = bpf_map_lookup_elem(&evict_index, &k);

	if (!sp)
		return 0;
	last = bpf_map_lookup_elem(&evict_pslot_pcread, sp);
	if (last) {
		if (l->read && *last == l->read) {
			pc_stat(PC_A_READ_AGAIN, 1);
			return 0;
		}
		if (pc_skip_first_read && *last == PC_FRESH) {
			*last = l->read;
			pc_stat(PC_A_FIRST_READS, 1);
			return 0;
		}
		*last = l->read;
	}
	evict_policy_accessed(*sp);
	l->hits++;
	return 0;
}

static long pc_apply_step(__u64 i, void *arg)
{
	struct pc_loop *lp = arg;
	struct pc_event *ev = &lp->b->ev[i & (PC_BATCH - 1)];
	__u64 key = (__u64)ev->file << 32 | (__u32)ev->index;
	__u32 *sp;

	switch (ev->op) {
	case PC_ADD: {
		sp = bpf_map_lookup_elem(&evict_index, &key);
		if (sp) {
			evict_remove(*sp, NULL);
			pc_stat(PC_A_READDED, 1);
		}
		/* Never let the insertion evict on its own: its victim would
		 * be lost to the agent. */
		if (evict_next_unused >= evict_capacity && !evict_free_top) {
			pc_evict_one(lp->out);
			pc_stat(PC_A_FULL, 1);
		}
#ifdef PC_ACTOR
		PC_ACTOR = (__u64)ev->tgid << 32 | ev->tid;
#endif
		pc_insert(key, 1U << (ev->order & 15));
		pc_stat(PC_A_ADDED, 1);
		if ((sp = bpf_map_lookup_elem(&evict_index, &key))) {
			__u64 *last = bpf_map_lookup_elem(&evict_pslot_pcread, sp);

			if (last)
				*last = pc_skip_first_read ? PC_FRESH : 0;
		}
		break;
	}
	case PC_DEL:
		sp = bpf_map_lookup_elem(&evict_index, &key);
		if (sp) {
			evict_remove(*sp, NULL);
			pc_stat(PC_A_REMOVED, 1);
		} else {
			pc_stat(PC_A_DEL_UNKNOWN, 1);
		}
		break;
	case PC_ACC: {
		struct pc_acc_loop l = { .key = key };

		if (ev->read)
			l.read = (__u64)ev->tid << 32 | ev->read;
		__u32 nr = ev->nr;

		if (nr > PC_MAX_ACC_PAGES)
			nr = PC_MAX_ACC_PAGES;
		bpf_loop(nr, pc_acc_step, &l, 0);
		pc_stat(PC_A_ACC_HITS, l.hits);
		break;
	}
	}
	return 0;
}

static long pc_victim_step(__u64 i, void *arg)
{
	struct pc_loop *lp = arg;

	if (lp->out->pages >= lp->want || evict_next_unused - evict_free_top == 0)
		return 1; /* enough, or nothing tracked */
	return pc_evict_one(lp->out) ? 1 : 0;
}

CISTERN_CALL(pc_apply, struct pc_run_args, a)
{
	__u32 zero = 0, n;
	struct pc_loop lp = {};

	lp.b = bpf_map_lookup_elem(&pc_batches, &zero);
	lp.out = bpf_map_lookup_elem(&pc_out, &zero);
	if (!lp.b || !lp.out || !evict_initialized) {
		a->ret = -EVICT_EINVAL;
		return;
	}
	lp.out->n = 0;
	lp.out->pages = 0;
	n = lp.b->n;
	if (n > PC_BATCH)
		n = PC_BATCH;
	bpf_loop(n, pc_apply_step, &lp, 0);
	lp.want = a->want;
	if (lp.out->n < PC_MAX_VICTIMS)
		bpf_loop(PC_MAX_VICTIMS - lp.out->n, pc_victim_step, &lp, 0);
	a->got = lp.out->n;
	a->ret = 0;
}

#endif
