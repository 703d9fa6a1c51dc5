/* SPDX-License-Identifier: GPL-2.0 */
/*
 * query.bpf.h - the operator templates of `cistern query`.
 *
 * Every table's program fills a record of Q_NSLOT 64-bit slots (slot 0 time,
 * 1 pid, 2 tid, 3 cgroup id, 4-5 comm, table columns from 6, join key in
 * Q_JKEY) and hands it to these operators. Which operators run, and with which
 * operands, is decided by frozen .rodata set by the Go planner before the
 * load: the verifier sees every q_* value as a constant and prunes the
 * branches a plan does not use, so each plan is a specialisation of one
 * template that the test suite loads across the whole parameter space.
 *
 *   MVSF        read the hook's fields, emit the record (q_emit = Q_EMIT_FULL;
 *               entry/exit tables emit both halves, Q_KIND_ENTER/EXIT)
 *   join        entry half kept per join key in q_inflight, merged at exit
 *   filter      up to Q_MAXCL masked comparisons (IN: up to Q_MAXV values)
 *   projection  only the q_nproj slots the user side needs
 *   partial agg COUNT/SUM/MIN/MAX/log2 HIST per key in a per-CPU hash
 *
 * Loops are unrolled over small constant bounds; slot indices are masked.
 */
#ifndef CISTERN_QUERY_BPF_H
#define CISTERN_QUERY_BPF_H

#define Q_NSLOT 32
#define Q_SMASK (Q_NSLOT - 1)
#define Q_NSAVED 16
#define Q_JKEY 31
#define Q_MAXCL 6
#define Q_MAXV 4
#define Q_MAXPROJ 16
#define Q_MAXKEY 4
#define Q_HIST 64

#define Q_EMIT_NONE 0 /* count only: used to sample event rates */
#define Q_EMIT_FULL 1
#define Q_EMIT_PROJ 2
#define Q_EMIT_AGG 3

#define Q_KIND_FULL 0
#define Q_KIND_ENTER 1
#define Q_KIND_EXIT 2
#define Q_KIND_PROJ 3 /* implied by q_emit: not written to the ring */

enum { Q_OP_EQ, Q_OP_NE, Q_OP_LT, Q_OP_LE, Q_OP_GT, Q_OP_GE, Q_OP_ULT, Q_OP_ULE, Q_OP_UGT, Q_OP_UGE };

/* q_stats slots (per CPU) */
/* Q_ST_ENTRIES counts entry halves, in the optimizer's sampling run only
 * (q_emit = Q_EMIT_NONE): with the join on, EVENTS then counts the pairs
 * whose entry passed the entry-time clauses, so EVENTS/ENTRIES and
 * MATCHED/ENTRIES are the sampled selectivities. */
enum { Q_ST_EVENTS, Q_ST_MATCHED, Q_ST_LOST_RB, Q_ST_LOST_AGG, Q_ST_LOST_JOIN, Q_ST_EMITTED, Q_ST_ENTRIES, Q_ST_N };

const volatile __u32 q_emit = Q_EMIT_FULL;
const volatile __u32 q_join = 0;      /* 1: join entry/exit in the kernel */
const volatile __u32 q_self = 0;      /* our own tgid: never observed */
const volatile __u32 q_need_comm = 1;
const volatile __u32 q_need_cgroup = 1;
/* Nonzero: the plan admits this cgroup only (an entry clause cgroup_id =
 * X), and the template checks it first, before any slot is filled or the
 * join is looked up: every task's syscalls reach the global hooks, and
 * the other tasks' then cost one helper call, as in a hand-written
 * program. Set only for templates whose halves run in the task's context. */
const volatile __u64 q_cgroup_only = 0;
/* Entry slots the join keeps (q_inflight's value size is set to match):
 * the plan's, not all Q_NSAVED. */
const volatile __u32 q_nsaved = Q_NSAVED;
const volatile __u32 q_need_args = 1; /* syscalls: read arg0-5 (a probe read) */
/* Wake the reader when the waiting ring bytes cross this; it also polls on a
 * short deadline, so a crossing missed under concurrency only delays it. */
const volatile __u32 q_wake_bytes = 0;
const volatile __u32 q_nfull = Q_NSLOT; /* slots a whole record carries */
const volatile __u32 q_ncl = 0;
const volatile __u32 q_cl_slot[Q_MAXCL] = {};
const volatile __u32 q_cl_op[Q_MAXCL] = {};
const volatile __u32 q_cl_enter[Q_MAXCL] = {}; /* also checked at entry */
const volatile __u32 q_cl_nv[Q_MAXCL] = {};
const volatile __u64 q_cl_mask[Q_MAXCL] = {};
const volatile __u64 q_cl_val[Q_MAXCL * Q_MAXV] = {};
const volatile __u32 q_nproj = 0;
const volatile __u32 q_proj[Q_MAXPROJ] = {};
const volatile __u32 q_nkey = 0;
const volatile __u32 q_key[Q_MAXKEY] = {};
const volatile __u32 q_aggslot = 0;
const volatile __u32 q_agg_signed = 0;
const volatile __u32 q_hist = 0; /* 1: keep the log2 histogram */

/* q_agg's key and value sizes are cut at load to the epoch plus q_nkey
 * slots, and to count..max without the histogram unless q_hist: helpers
 * read only the map's sizes, and the verifier prunes the hist branch. */
struct q_aggkey {
	__u64 epoch;
	__u64 k[Q_MAXKEY];
};

struct q_aggval {
	__u64 count;
	__u64 sum;
	__u64 min;
	__u64 max;
	__u64 hist[Q_HIST];
};

struct q_saved {
	__u64 s[Q_NSAVED];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} q_rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, Q_ST_N);
	__type(key, __u32);
	__type(value, __u64);
} q_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[Q_NSLOT]);
} q_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU); /* per-CPU LRU lists: no shared lock */
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct q_saved);
} q_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct q_aggkey);
	__type(value, struct q_aggval);
} q_agg SEC(".maps");

/* q_ctl[0]: the aggregation epoch (window); user space flips it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} q_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct q_aggval);
} q_zero SEC(".maps");

static __always_inline void q_count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&q_stats, &which);
	if (c)
		*c += 1;
}

static __always_inline __u64 *q_record(void)
{
	__u32 z = 0;
	return bpf_map_lookup_elem(&q_scratch, &z);
}

/* q_begin_at fills the common slots but the time; it returns 0 for our
 * own process. */
static __always_inline int q_begin_at(__u64 *r)
{
	__u64 pt = bpf_get_current_pid_tgid();
	if (q_self && (pt >> 32) == q_self)
		return 0;
	r[0] = 0;
	r[1] = pt >> 32;
	r[2] = (__u32)pt;
	/* q_cgroup_only: the caller checked it (q_foreign) */
	r[3] = q_cgroup_only ? q_cgroup_only : q_need_cgroup ? bpf_get_current_cgroup_id() : 0;
	r[4] = 0;
	r[5] = 0;
	if (q_need_comm)
		bpf_get_current_comm(&r[4], 16);
	return 1;
}

/* q_foreign: the current task is outside the only cgroup the plan admits. */
static __always_inline int q_foreign(void)
{
	return q_cgroup_only && bpf_get_current_cgroup_id() != q_cgroup_only;
}

static __always_inline int q_begin(__u64 *r)
{
	if (!q_begin_at(r))
		return 0;
	r[0] = bpf_ktime_get_ns();
	return 1;
}

static __always_inline int q_cmp(__u32 op, __u64 v, __u64 c)
{
	switch (op) {
	case Q_OP_LT: return (__s64)v < (__s64)c;
	case Q_OP_LE: return (__s64)v <= (__s64)c;
	case Q_OP_GT: return (__s64)v > (__s64)c;
	case Q_OP_GE: return (__s64)v >= (__s64)c;
	case Q_OP_ULT: return v < c;
	case Q_OP_ULE: return v <= c;
	case Q_OP_UGT: return v > c;
	case Q_OP_UGE: return v >= c;
	}
	return 0;
}

/* q_filter: conjunction of the pushed clauses; entry_only checks only those
 * whose slots the entry half already holds. */
static __always_inline int q_filter(__u64 *r, int entry_only)
{
#pragma unroll
	for (int i = 0; i < Q_MAXCL; i++) {
		if (i >= q_ncl)
			break;
		if (entry_only && !q_cl_enter[i])
			continue;
		__u64 v = r[q_cl_slot[i] & Q_SMASK] & q_cl_mask[i];
		__u32 op = q_cl_op[i];
		if (op == Q_OP_EQ || op == Q_OP_NE) {
			int any = 0;
#pragma unroll
			for (int j = 0; j < Q_MAXV; j++)
				if (j < q_cl_nv[i] && v == q_cl_val[i * Q_MAXV + j])
					any = 1;
			if (any != (op == Q_OP_EQ))
				return 0;
		} else if (!q_cmp(op, v, q_cl_val[i * Q_MAXV])) {
			return 0;
		}
	}
	return 1;
}

/* q_flags: one wake-up per q_wake_bytes of records (a wake-up per record
 * batch costs an irq_work and a reader context switch on the traced CPU). */
static __always_inline __u64 q_flags(__u32 bytes)
{
	q_count(Q_ST_EMITTED);
	__u64 avail = bpf_ringbuf_query(&q_rb, BPF_RB_AVAIL_DATA);
	return avail >= q_wake_bytes && avail < q_wake_bytes + bytes + 8 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline void q_emit_full(__u64 *r, __u32 kind)
{
	__u64 *o = bpf_ringbuf_reserve(&q_rb, 8 * (q_nfull + 1), 0);
	if (!o) {
		q_count(Q_ST_LOST_RB);
		return;
	}
	o[0] = kind;
	/* a half of an entry/exit table carries its join key in slot 16 */
	if (kind != Q_KIND_FULL)
		r[Q_NSAVED] = r[Q_JKEY];
#pragma unroll
	for (int i = 0; i < Q_NSLOT; i++)
		if (i < q_nfull)
			o[i + 1] = r[i];
	bpf_ringbuf_submit(o, q_flags(8 * (q_nfull + 1)));
}

/* A projected record is only its slots: a plan that projects emits nothing
 * else, so user space knows the kind. */
static __always_inline void q_emit_proj(__u64 *r)
{
	__u64 *o = bpf_ringbuf_reserve(&q_rb, 8 * q_nproj, 0);
	if (!o) {
		q_count(Q_ST_LOST_RB);
		return;
	}
#pragma unroll
	for (int i = 0; i < Q_MAXPROJ; i++)
		if (i < q_nproj)
			o[i] = r[q_proj[i] & Q_SMASK];
	bpf_ringbuf_submit(o, q_flags(8 * q_nproj));
}

static __always_inline int q_log2(__u64 v)
{
	int n = 0;
	if (v >> 32) { v >>= 32; n += 32; }
	if (v >> 16) { v >>= 16; n += 16; }
	if (v >> 8) { v >>= 8; n += 8; }
	if (v >> 4) { v >>= 4; n += 4; }
	if (v >> 2) { v >>= 2; n += 2; }
	if (v >> 1) { n += 1; }
	return n;
}

static __always_inline void q_aggregate(__u64 *r)
{
	struct q_aggkey k = {};
	__u32 z = 0;
	__u64 *ep = bpf_map_lookup_elem(&q_ctl, &z);
	k.epoch = ep ? *ep : 0;
#pragma unroll
	for (int i = 0; i < Q_MAXKEY; i++)
		if (i < q_nkey)
			k.k[i] = r[q_key[i] & Q_SMASK];
	struct q_aggval *a = bpf_map_lookup_elem(&q_agg, &k);
	if (!a) {
		struct q_aggval *zero = bpf_map_lookup_elem(&q_zero, &z);
		if (!zero)
			return;
		bpf_map_update_elem(&q_agg, &k, zero, BPF_NOEXIST);
		a = bpf_map_lookup_elem(&q_agg, &k);
		if (!a) {
			q_count(Q_ST_LOST_AGG);
			return;
		}
	}
	__u64 v = r[q_aggslot & Q_SMASK];
	if (a->count == 0) {
		a->min = v;
		a->max = v;
	} else if (q_agg_signed) {
		if ((__s64)v < (__s64)a->min) a->min = v;
		if ((__s64)v > (__s64)a->max) a->max = v;
	} else {
		if (v < a->min) a->min = v;
		if (v > a->max) a->max = v;
	}
	a->count++;
	a->sum += v;
	if (q_hist) {
		int b = 0;
		if ((__s64)v > 0)
			b = q_log2(v) + 1;
		a->hist[b & (Q_HIST - 1)]++;
	}
}

/* q_event takes a complete row: filter, then emit or aggregate it. */
static __always_inline void q_event(__u64 *r)
{
	q_count(Q_ST_EVENTS);
	if (!q_filter(r, 0))
		return;
	q_count(Q_ST_MATCHED);
	switch (q_emit) {
	case Q_EMIT_FULL: q_emit_full(r, Q_KIND_FULL); break;
	case Q_EMIT_PROJ: q_emit_proj(r); break;
	case Q_EMIT_AGG: q_aggregate(r); break;
	}
}

/* q_enter handles the entry half of an entry/exit table (filled by
 * q_begin_at): the clock is read only for entries that pass the filter. */
static __always_inline void q_enter(__u64 *r)
{
	if (q_emit == Q_EMIT_NONE) /* a constant: pruned from every real plan */
		q_count(Q_ST_ENTRIES);
	if (!q_join) {
		if (q_emit != Q_EMIT_NONE) {
			r[0] = bpf_ktime_get_ns();
			q_emit_full(r, Q_KIND_ENTER);
		}
		return;
	}
	if (!q_filter(r, 1))
		return;
	r[0] = bpf_ktime_get_ns();
	/* Only this thread (join key) writes its entry: after the first, it is
	 * rewritten in place. An update would swap in a fresh LRU element and
	 * free the old one on every call. */
	struct q_saved *e = bpf_map_lookup_elem(&q_inflight, &r[Q_JKEY]);
	if (e) {
#pragma unroll
		for (int i = 0; i < Q_NSAVED; i++)
			if (i < q_nsaved)
				e->s[i] = r[i];
		return;
	}
	if (bpf_map_update_elem(&q_inflight, &r[Q_JKEY], r, BPF_ANY))
		q_count(Q_ST_LOST_JOIN);
}

/* q_restore copies the saved entry slots below n into r (the rest: 0). */
static __always_inline void q_restore(__u64 *r, struct q_saved *e, int n)
{
#pragma unroll
	for (int i = 0; i < Q_NSAVED; i++)
		if (i < n)
			r[i] = i < q_nsaved ? e->s[i] : 0;
}

/* q_take returns the current thread's saved entry half, or NULL when none
 * is in flight, and marks it taken (slot 0, the entry time, becomes 0:
 * cheaper than a delete, and the element is reused by the next entry). */
static __always_inline struct q_saved *q_take(__u64 key)
{
	struct q_saved *e = bpf_map_lookup_elem(&q_inflight, &key);
	if (!e || e->s[0] == 0)
		return NULL;
	return e;
}

/* q_exit_lookup returns the saved entry half (kernel join) or NULL; without
 * the kernel join it emits the exit half and returns NULL. */
static __always_inline struct q_saved *q_exit_lookup(__u64 *r)
{
	if (!q_join) {
		q_count(Q_ST_EVENTS);
		if (q_emit != Q_EMIT_NONE)
			q_emit_full(r, Q_KIND_EXIT);
		return NULL;
	}
	return bpf_map_lookup_elem(&q_inflight, &r[Q_JKEY]);
}

#endif
