/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/evict.bpf.h - eviction policies as BPF functions over eviction
 * lists kept in maps (after cachebpf: policy functions, eviction lists, a
 * registry of valid entries and a fallback), and a cache that runs them.
 * This header holds the model, the maps and the cache's state; it includes
 * its parts, in order: cistern/evict/lists.bpf.h (nodes and lists),
 * candidates.bpf.h (proposing, iteration, sampling), cache.bpf.h (the
 * cache: removal, fallback, insertion) and programs.bpf.h (evict_init,
 * evict_replay, evict_drain). The policies are cistern/policy/<name>.bpf.h.
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
 * docs/eviction.md, "Adding a policy", has the steps: this header, two
 * stubs, one row of evict/registry.go; bpf/examples/evictbig.bpf.h and
 * examples/evictbig add one from their own package)
 *   #include "cistern/evict.bpf.h"      (in cistern/policy/<name>.bpf.h)
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
/* Set by an owner that keeps fewer entries than its slots (the page-cache
 * agent: slots for the cgroup's limit and some, pages kept below it): the
 * units it keeps on average. A policy whose segments are shares of the
 * cache (W-TinyLFU) sizes them by it; 0: by the capacity. Never makes the
 * cache evict by itself. */
volatile __u64 evict_size_hint;

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
/* The flags (EVICT_REQ_*) of the request being inserted or told of, for
 * the policy's evict_policy_added() and evict_policy_accessed() (get-scan
 * reads EVICT_REQ_SCAN). */
__u32 evict_req_flags;
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

/* The parts, in order: each uses what the ones before define. */
#include "cistern/evict/lists.bpf.h"
#include "cistern/evict/candidates.bpf.h"
#include "cistern/evict/cache.bpf.h"
#include "cistern/evict/programs.bpf.h"

#endif
