/* SPDX-License-Identifier: GPL-2.0 */
/* cistern/evict.h - structs shared by evict.bpf.h and package evict (Go).
 * Package evict mirrors every layout here; change both together. */
#ifndef CISTERN_EVICT_H
#define CISTERN_EVICT_H

#define EVICT_NIL 0xffffffffu        /* no slot / no list */
#define EVICT_MAX_LISTS 8            /* eviction lists per policy (power of 2) */
#define EVICT_MAX_CANDIDATES 32      /* proposals per evict() call (power of 2) */
#define EVICT_BATCH 4096             /* trace records per replay run (power of 2) */
#define EVICT_DEFAULT_SLOTS 65536    /* cache capacity in entries; the loader sets it */
#define EVICT_QUEUE_LEN 16384        /* evict_events / evict_victims queue entries */

/* An event another program queues for evict_drain (the cache's single
 * writer): op EVICT_EV_ACCESS (a hit), EVICT_EV_FILL (a new or rewritten
 * entry of size units), EVICT_EV_REMOVE (the owner deleted it). Victims come
 * back on evict_victims with op EVICT_EV_REMOVE. */
struct evict_event {
	__u64 key;
	__u32 size;
	__u32 op;
};
#define EVICT_EV_ACCESS 1
#define EVICT_EV_FILL 2
#define EVICT_EV_REMOVE 3

/* One node per entry slot, in the evict_nodes ARRAY: the links of the
 * eviction list the entry is on, and one word for the policy (a visited bit,
 * a frequency, ...). */
struct evict_node {
	__u32 prev;   /* slot towards the head, EVICT_NIL at the head */
	__u32 next;   /* slot towards the tail, EVICT_NIL at the tail */
	__u32 list;   /* list id, EVICT_NIL when on none */
	__u32 pdata;  /* the policy's; zeroed when the entry is added */
};

/* The registry: one per slot, in the evict_entries ARRAY. */
struct evict_entry {
	__u64 key;
	__u32 size;
	__u32 resident;  /* 1 while the slot holds key */
};

struct evict_list {
	__u32 head;
	__u32 tail;
	__u32 len;
	__u32 used;  /* created by evict_list_create() */
};

/* What evict() gets: nr candidates wanted, and room for them. The policy
 * writes slots into cand[0..n). */
struct evict_ctx {
	__u32 nr;
	__u32 n;
	__u32 cand[EVICT_MAX_CANDIDATES];
};

/* One trace record; hit, evicted and victim are written back by replay. */
struct evict_req {
	__u64 key;
	__u32 size;
	__u8 hit;
	__u8 evicted;  /* how many entries this request evicted */
	__u8 flags;    /* in: EVICT_REQ_* */
	__u8 pad;
	__u64 victim;  /* key of the last entry it evicted */
};

/* evict_req.flags: a hit the policy is not told of. The page-cache agent
 * reports one read in N to its policy (pc_access_mask); auto's shadow
 * caches replay the other reads with this flag, so that they simulate the
 * policy as it will run: hits and misses alike, only accessed() is not
 * called. A miss is always inserted (the kernel reports every add). */
#define EVICT_REQ_UNSEEN 1
/* evict_req.flags: the request is a scan's (a thread reading in large
 * reads: the page-cache agent's scan detection, or auto's shadow of it).
 * Policies read it as evict_req_flags during evict_policy_added() and
 * evict_policy_accessed(): get-scan puts a new entry on its scan list,
 * and moves a scan entry that a request without it hits to its get list. */
#define EVICT_REQ_SCAN 2

struct evict_batch {
	__u32 n;
	__u32 pad;
	struct evict_req req[EVICT_BATCH];
};

/* Argument struct of evict_init, evict_replay, evict_drain and
 * evict_periodic (CISTERN_CALL programs, cistern/call.bpf.h). */
struct evict_run_args {
	__s32 ret;
	__u32 n;      /* out: requests replayed */
	__u64 hits;   /* out: hits in this run */
};

enum evict_stat {
	EVICT_STAT_REQUESTS,
	EVICT_STAT_HITS,
	EVICT_STAT_MISSES,
	EVICT_STAT_BYTES,
	EVICT_STAT_HIT_BYTES,
	EVICT_STAT_INSERTS,
	EVICT_STAT_EVICTIONS,          /* entries removed, by policy or fallback */
	EVICT_STAT_EVICT_CALLS,        /* evict() calls */
	EVICT_STAT_PROPOSED,           /* candidates proposed (clamped to the ctx) */
	EVICT_STAT_INVALID,            /* proposals refused: out of range, not resident */
	EVICT_STAT_SHORT,              /* evict() calls that proposed fewer than nr */
	EVICT_STAT_FALLBACKS,          /* evict() calls the fallback had to complete */
	EVICT_STAT_FALLBACK_EVICTIONS, /* entries the fallback removed */
	EVICT_STAT_NO_ROOM,            /* misses not inserted: nothing could be evicted */
	EVICT_STAT_TOO_BIG,            /* misses not inserted: larger than evict_byte_capacity */
	EVICT_STAT_EVENTS,             /* events evict_drain applied */
	EVICT_STAT_VICTIMS_LOST,       /* victims evict_victims had no room for */
	EVICT_STAT_MAX,
};

#endif
