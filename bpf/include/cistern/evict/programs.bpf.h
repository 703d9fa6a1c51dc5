/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict/programs.bpf.h - eviction: programs.
 *
 * Part of cistern/evict.bpf.h (include that, not this): the programs user
 * space calls with BPF_PROG_TEST_RUN (cistern/call.bpf.h; package evict
 * drives them): evict_init (the policy's init, once), evict_replay (a
 * batch of evict_batches[0], in order, outcomes written back) and
 * evict_drain (the evict_events other programs queued, victims of fills
 * onto evict_victims), and the object's license.
 */
#ifndef CISTERN_EVICT_PROGRAMS_BPF_H
#define CISTERN_EVICT_PROGRAMS_BPF_H

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

#endif /* CISTERN_EVICT_PROGRAMS_BPF_H */
