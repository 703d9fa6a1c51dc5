/* SPDX-License-Identifier: GPL-2.0 */
/* The page-cache agent's side of an eviction policy, in the kernel's path.
 * Included after a policy's header (cistern/policy/<name>.bpf.h) by its
 * stub bpf/pagecache/pc_<name>.bpf.c, so the tracepoint programs
 * (track.bpf.h) and the very policy code the replay tests check are one
 * object.
 *
 * WHO WRITES THE POLICY
 *   The evict framework is single-writer and calls helpers, so no
 *   bpf_spin_lock can guard it. Every event goes on an MPSC queue
 *   (pc_queue: an array of slots with sequence numbers, a reservation by
 *   compare-and-swap, a counted drop when full), and then the program tries
 *   a lock (pc_lock, a compare-and-swap that never waits): the CPU that
 *   gets it applies the queue in order, its own event and whatever other
 *   CPUs queued while it was held, releases it and looks again. A CPU that
 *   does not get it leaves its event to the holder. A bpf_timer (pc_sweep,
 *   started by pc_start) applies what is ever stranded (an event published
 *   just after its holder looked, with no later event to carry it).
 *
 * WHAT USER SPACE DOES
 *   Only what BPF cannot: dropping the victims' pages. pc_apply (an XDP
 *   program run with BPF_PROG_TEST_RUN, cistern/call.bpf.h) takes the lock
 *   (-PC_EBUSY when held: the agent tries again), applies the queue and
 *   the batch the agent passes (its victims that stayed cached, added
 *   back), and proposes victims covering want pages. Victims leave the
 *   policy when proposed: the agent evicts them, and the kernel's delete
 *   events for them are not applied (pc_self_tid). The agent sleeps on
 *   pc_wake, a small ring buffer the policy writes once the pages it
 *   tracks reach pc_wake_pages, which the agent sets below its limit. */
#ifndef CISTERN_PC_APPLY_BPF_H
#define CISTERN_PC_APPLY_BPF_H

#include "cistern/pagecache.h"

#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC 1
#endif

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

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PC_QUEUE_LEN);
	__type(key, __u32);
	__type(value, struct pc_qslot);
} pc_queue SEC(".maps");

/* The agent's wakeup: one record when the tracked pages reach
 * pc_wake_pages (the smallest ring buffer: one page). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} pc_wake SEC(".maps");

struct pc_timer {
	struct bpf_timer t;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pc_timer);
} pc_timers SEC(".maps");

__u32 pc_lock;      /* 1 while a CPU (or the agent's pc_apply) writes the policy */
__u64 pc_q_tail;    /* next position to reserve */
__u64 pc_q_head;    /* next position to apply (the lock's holder only) */
/* Set by the agent: wake it once the policy tracks this many pages (0:
 * never); pc_woken is set with the wakeup and cleared by the agent. */
volatile __u64 pc_wake_pages;
volatile __u32 pc_woken;
const volatile __u64 pc_sweep_ns = 20 * 1000 * 1000;

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


struct pc_loop {
	struct pc_batch *b;
	struct pc_victims *out;
	__u32 want;  /* pages */
	__u32 taken; /* the batch's events queued */
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

/* A read: accessed() for each tracked folio of its pages. A global
 * function of its own, so that its locals are not on the stack of the
 * insertion's call chain (get-scan's reaches 6.1's 512 bytes). */
__noinline int pc_apply_acc(struct pc_event *ev)
{
	struct pc_acc_loop l = {};
	__u32 nr;

	if (!ev)
		return 0;
	l.key = (__u64)ev->file << 32 | (__u32)ev->index;
	/* Who reads, for get-scan's accessed(): a scan entry a point read
	 * hits moves to its get list. */
	evict_req_flags = (ev->flags & PC_EV_SCAN) ? EVICT_REQ_SCAN : 0;
#ifdef PC_ACTOR
	PC_ACTOR = (__u64)ev->tgid << 32 | ev->tid;
#endif
	if (ev->read)
		l.read = (__u64)ev->tid << 32 | ev->read;
	nr = ev->nr;
	if (nr > PC_MAX_ACC_PAGES)
		nr = PC_MAX_ACC_PAGES;
	bpf_loop(nr, pc_acc_step, &l, 0);
	pc_stat(PC_A_ACC_HITS, l.hits);
	return 0;
}

/* Applies one event to the policy (the lock held). */
static __always_inline void pc_apply_event(struct pc_event *ev)
{
	__u64 key;
	__u32 *sp;

	key = (__u64)ev->file << 32 | (__u32)ev->index;
	pc_stat(PC_A_APPLIED, 1);

	switch (ev->op) {
	case PC_ADD: {
		sp = bpf_map_lookup_elem(&evict_index, &key);
		if (sp) {
			evict_remove(*sp, NULL);
			pc_stat(PC_A_READDED, 1);
		}
		/* The tracker is full (capacity is the cgroup's limit and some:
		 * stale entries): the insertion evicts on its own, and its
		 * victim's folio is left to the kernel's reclaim (counted). */
		if (evict_next_unused >= evict_capacity && !evict_free_top)
			pc_stat(PC_A_FULL, 1);
#ifdef PC_ACTOR
		PC_ACTOR = (__u64)ev->tgid << 32 | ev->tid;
#endif
		{
			struct evict_req r = { .key = key, .size = 1U << (ev->order & 15),
					       .flags = (ev->flags & PC_EV_SCAN) ? EVICT_REQ_SCAN : 0 };

			evict_cache_access(&r);
		}
		pc_stat(PC_A_ADDED, 1);
		if (pc_wake_pages && evict_used_bytes >= pc_wake_pages && !pc_woken) {
			__u64 pages = evict_used_bytes;

			pc_woken = 1;
			bpf_ringbuf_output(&pc_wake, &pages, sizeof(pages), BPF_RB_FORCE_WAKEUP);
			pc_stat(PC_A_WAKEUPS, 1);
		}
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
	case PC_ACC:
		pc_apply_acc(ev);
		break;
	}
}

static long pc_victim_step(__u64 i, void *arg)
{
	struct pc_loop *lp = arg;

	if (lp->out->pages >= lp->want || evict_next_unused - evict_free_top == 0)
		return 1; /* enough, or nothing tracked */
	return pc_evict_one(lp->out) ? 1 : 0;
}

/* ---- the queue and the lock ---- */

static __always_inline int pc_trylock(void)
{
	return __sync_val_compare_and_swap(&pc_lock, 0, 1) == 0;
}

static __always_inline void pc_unlock(void)
{
	__sync_lock_test_and_set(&pc_lock, 0); /* an exchange: a full barrier */
}

/* Reserves the next slot of the queue; its event, or NULL when the queue
 * is full (or every reservation lost its race PC_PUSH_TRIES times): the
 * caller counts the drop. The caller writes the event in place (not
 * through its stack: get-scan's call chain is at 6.1's 512-byte stack
 * limit) and publishes it with pc_event_commit(ev, *lap). */
static __always_inline struct pc_event *pc_event_reserve(__u64 *lapp)
{
	for (int i = 0; i < PC_PUSH_TRIES; i++) {
		__u64 pos = *(volatile __u64 *)&pc_q_tail, lap = pos & ~(__u64)(PC_QUEUE_LEN - 1), seq;
		__u32 idx = pos & (PC_QUEUE_LEN - 1);
		struct pc_qslot *s = bpf_map_lookup_elem(&pc_queue, &idx);

		if (!s)
			return NULL;
		seq = *(volatile __u64 *)&s->seq;
		if (seq == lap) {
			if (__sync_val_compare_and_swap(&pc_q_tail, pos, pos + 1) != pos)
				continue; /* another CPU took pos */
			*lapp = lap;
			return &s->ev;
		}
		if (seq < lap)
			return NULL; /* full: the slot's event of the last lap is not applied yet */
		/* seq > lap: pc_q_tail moved on since it was read */
	}
	return NULL;
}

/* Publishes an event pc_event_reserve returned. */
static __always_inline void pc_publish(struct pc_event *ev, __u64 lap)
{
	struct pc_qslot *s = (struct pc_qslot *)((char *)ev - __builtin_offsetof(struct pc_qslot, ev));

	__sync_lock_test_and_set(&s->seq, lap + 1);
}

/* 1 when the event at the head is published (a racy look: a hint). */
static __always_inline int pc_pending(void)
{
	__u64 h = *(volatile __u64 *)&pc_q_head;
	__u32 idx = h & (PC_QUEUE_LEN - 1);
	struct pc_qslot *s = bpf_map_lookup_elem(&pc_queue, &idx);

	return s && *(volatile __u64 *)&s->seq == (h & ~(__u64)(PC_QUEUE_LEN - 1)) + 1;
}

/* Applies the event at the head of the queue (the lock held); 0 when
 * there is none, or it is reserved but not published yet. A global
 * function: the policy is verified once per program, not at each caller.
 * Frames: the policy takes 4 below it, and it is called at most 3 deep
 * (from the timer's callback), of the verifier's 8. */
__noinline int pc_drain_one(void)
{
	__u64 h = pc_q_head, lap = h & ~(__u64)(PC_QUEUE_LEN - 1);
	__u32 idx = h & (PC_QUEUE_LEN - 1);
	struct pc_qslot *s = bpf_map_lookup_elem(&pc_queue, &idx);

	if (!s || *(volatile __u64 *)&s->seq != lap + 1)
		return 0;
	/* Applied in place (no copy on the stack): no producer writes the
	 * slot until it is freed below. */
	pc_apply_event(&s->ev);
	pc_q_head = h + 1;
	__sync_lock_test_and_set(&s->seq, lap + PC_QUEUE_LEN); /* free for the next lap */
	return 1;
}

/* Applies up to max events of the queue in order (the lock held); returns
 * how many. A plain bounded loop around a global call, not bpf_loop: no
 * callback frame, which get-scan's call chain cannot afford on 6.1 (512
 * bytes of stack over its 8 frames). Counted from the head: a counter
 * carried across iterations would be a state of its own to the verifier
 * at each. What is left, the next event, pc_apply or the timer applies. */
#define PC_DRAIN_EVENT 256   /* per lock round in a tracepoint program */
#define PC_DRAIN_CALL 2048   /* per pc_apply, before the batch and after */
#define PC_SWEEP_MAX 256     /* per timer tick (stranded events are few) */

#define pc_drain(max)                                  \
	({                                             \
		__u64 __h0 = pc_q_head;                \
		for (int __i = 0; __i < (max); __i++)  \
			if (!pc_drain_one())           \
				break;                 \
		(__u32)(pc_q_head - __h0);             \
	})

/* Takes the lock and applies the queue, and again if events came while it
 * was held (their CPUs found it taken), at most PC_COMBINE_ROUNDS times:
 * what is left, the next event or the timer applies. */
static __always_inline __u32 pc_combine(void)
{
	__u32 n = 0;

	for (int i = 0; i < PC_COMBINE_ROUNDS; i++) {
		if (!pc_trylock())
			return n;
		n += pc_drain(PC_DRAIN_EVENT);
		pc_unlock();
		if (!pc_pending())
			break;
	}
	return n;
}

static __always_inline void stat(__u32 s); /* track.bpf.h */

/* An event from a tracepoint program, written in its slot: published,
 * then applied by whoever holds the lock. */
static __always_inline void pc_event_commit(struct pc_event *ev, __u64 lap)
{
	pc_publish(ev, lap);
	if (pc_combine() == 0)
		stat(PC_T_QUEUED);
}

#include "track.bpf.h"

/* ---- the policy's periodic work (LHD), under the lock ---- */

static __always_inline void pc_periodic(void)
{
#ifdef PC_PERIODIC
	struct evict_run_args pa = {};

	____evict_periodic(&pa);
#endif
}

/* ---- the timer: what the queue ever strands ---- */

static int pc_sweep(void *map, __u32 *key, struct pc_timer *t)
{
	__u32 n = 0;

	if (pc_trylock()) {
		n = pc_drain(PC_SWEEP_MAX);
		pc_periodic();
		pc_unlock();
	}
	if (n)
		pc_stat(PC_A_SWEPT, n);
	bpf_timer_start(&t->t, pc_sweep_ns, 0);
	return 0;
}

/* Starts the sweep timer (once; the agent calls it after loading). */
CISTERN_CALL(pc_start, struct pc_run_args, a)
{
	__u32 zero = 0;
	struct pc_timer *t = bpf_map_lookup_elem(&pc_timers, &zero);

	if (!t) {
		a->ret = -EVICT_EINVAL;
		return;
	}
	bpf_timer_init(&t->t, &pc_timers, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->t, pc_sweep);
	a->ret = bpf_timer_start(&t->t, pc_sweep_ns, 0);
}

/* ---- pc_apply: the agent's call ---- */

static long pc_batch_step(__u64 i, void *arg)
{
	struct pc_loop *lp = arg;
	struct pc_event *ev;
	__u64 lap;

	/* Full: the rest of the batch waits for the agent's next call (the
	 * seed's 240k adds, pushed 4096 a call where 3072 were applied, lost
	 * a third of them when this dropped). */
	if (!(ev = pc_event_reserve(&lap)))
		return 1;
	*ev = lp->b->ev[i & (PC_BATCH - 1)];
	pc_publish(ev, lap);
	lp->taken++;
	return 0;
}

CISTERN_CALL(pc_apply, struct pc_run_args, a)
{
	__u32 zero = 0, n;
	struct pc_loop lp = {};
	struct pc_batch *b = bpf_map_lookup_elem(&pc_batches, &zero);

	lp.b = b;
	lp.out = bpf_map_lookup_elem(&pc_out, &zero);
	a->taken = 0;
	if (!b || !lp.out || !evict_initialized) {
		a->ret = -EVICT_EINVAL;
		return;
	}
	if (!pc_trylock()) {
		pc_stat(PC_A_BUSY, 1);
		a->got = 0;
		a->ret = -PC_EBUSY;
		return;
	}
	lp.out->n = 0;
	lp.out->pages = 0;
	/* The queue first, which makes room; then the batch (victims added
	 * back, the seed) goes through it as far as it fits: one order for
	 * every event, and nothing of the agent's dropped. */
	pc_drain(PC_DRAIN_CALL);
	n = b->n;
	if (n > PC_BATCH)
		n = PC_BATCH;
	bpf_loop(n, pc_batch_step, &lp, 0);
	a->taken = lp.taken;
	pc_drain(PC_DRAIN_CALL);
	pc_periodic();
	lp.want = a->want;
	if (lp.out->n < PC_MAX_VICTIMS)
		bpf_loop(PC_MAX_VICTIMS - lp.out->n, pc_victim_step, &lp, 0);
	a->got = lp.out->n;
	pc_unlock();
	if (pc_pending())
		pc_combine();
	a->ret = 0;
}

#endif
