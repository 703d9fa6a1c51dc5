/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/kv.h - Kerby-KV structures shared by bpf/kv/kv.bpf.c and package kv.
 */
#ifndef CISTERN_KV_H
#define CISTERN_KV_H

#include "cistern/pool.h"

#define KV_KEY_MAX 250    /* memcached's key limit */
#define KV_KEY_BUF 256
#define KV_SUFFIX_BUF 32  /* " <flags> <bytes>\r\n" */
#define KV_WSLOTS 65536   /* write-tracking and miss-ticket slots (power of 2) */

/* What a GET reply needs, published as one unit under the entry's lock. */
struct kv_body {
	struct pool_ref ref;   /* the value's blocks */
	__u64 seq;             /* write clock when published */
	__u64 expire_ns;       /* 0: never; else bpf_ktime_get_ns() deadline */
	__u8 keylen;
	__u8 suffix_len;
	/* memcached's CAS unique of this value, 48 bits little-endian, when
	 * the value came from its reply to a gets; 0: unknown (gets passed) */
	__u8 cas[6];
	/* suffix before key: a GET of a short key then reads one cache line
	 * fewer (key[] is 256 bytes, mostly unused). */
	__u8 suffix[KV_SUFFIX_BUF];
	__u8 key[KV_KEY_BUF];  /* zero-padded */
};

/* Allocation-map value, keyed by the 64-bit hash of the key. */
struct kv_entry {
	struct bpf_spin_lock lock;
	__u32 dead;            /* set under the lock just before deletion */
	__u64 hash;            /* the key: detects a recycled element */
	__u64 birth;           /* eviction-ring generation of this entry */
	struct kv_body body;
};

/* Last write seen for a key-hash slot (UDP set/delete, TCP write). */
struct kv_write {
	__u64 seq;
	__u64 ts;
};

/* A GET that missed in the kernel and went on to memcached. */
struct kv_ticket {
	__u64 seq;             /* write clock at the miss */
	__u64 ts;
};

struct kv_fifo_slot {
	__u64 hash;
	__u64 birth;
};

/* kv_clock slots */
enum kv_clock {
	KV_CLOCK_WRITES = 0,   /* write sequence */
	KV_CLOCK_FLUSH_SEQ,    /* sequence of the last flush (flush_all, unparsable TCP) */
	KV_CLOCK_FLUSH_TS,
	KV_CLOCK_FIFO_HEAD,
	KV_CLOCK_FIFO_TAIL,
	KV_CLOCK_STAGE,        /* unused */
	KV_CLOCK_NETNS,        /* cookie of memcached's network namespace (TCP), set at attach */
	KV_CLOCK_MAX = 8,
};

/* Per-CPU counters in kv_stats; names in kv/stats.go. */
enum kv_stat {
	KV_HITS = 0,           /* GET answered at XDP */
	KV_MISSES,             /* GET passed to memcached */
	KV_FILLS,              /* values stored from memcached's GET replies */
	KV_FILL_REJECTED,      /* replies not stored: a write raced with them */
	KV_SETS,               /* UDP sets written through */
	KV_DELETES,            /* invalidations by UDP delete and other writes */
	KV_EVICTIONS,
	KV_OVERSIZE,           /* values larger than the in-kernel maximum */
	KV_POOL_FULL,          /* a value could not be stored even after evicting */
	KV_PASS_MALFORMED,     /* passed: no line end, bad framing, lengths that disagree */
	KV_TORN_RETRIES,       /* GET met a concurrently replaced value and retried */
	KV_READ_FAILURES,      /* GET gave up after retries: passed on */
	KV_MULTIGET,           /* multi-key gets, passed on */
	KV_MULTIPACKET,        /* requests spanning datagrams, passed on */
	KV_GROW_FAILED,        /* reply did not fit the XDP frame: handed to kv_ingress */
	KV_TCP_INVALIDATIONS,  /* keys invalidated by TCP writes */
	KV_TCP_FLUSHES,        /* unparsable TCP segments: whole cache invalidated */
	KV_WRITE_CONFLICTS,    /* near-simultaneous writes: key invalidated, not updated */
	KV_EXPIRED,
	KV_OBJECTS_FULL,       /* the allocation map was full */
	KV_UNSUPPORTED,        /* IP options, fragments, other commands: passed on */
	KV_TC_HITS,            /* hits served by kv_ingress: reply too big for the XDP frame */
	KV_EVENTS_LOST,        /* --policy: hit/fill/removal events the full queue dropped */
	KV_POLICY_FALLBACKS,   /* --policy: full before the drainer made room; FIFO evicted */
	KV_PASS_SYNTAX,        /* passed: a request memcached answers with an error */
	KV_PASS_LONG,          /* passed: a key over 250 bytes or a line over the parse buffer */
	KV_PASS_CAS,           /* passed: gets, gat, gats, mg (the kernel keeps no CAS value) */
	KV_UDP_FLUSHES,        /* UDP writes the kernel could not parse: whole cache invalidated */
	KV_TCP_CONNS,          /* memcached connections put in the sockhash (sockops) */
	KV_TCP_HITS,           /* TCP GET requests answered in the kernel */
	KV_TCP_MISSES,         /* TCP GETs passed: a key not cached */
	KV_TCP_PASS_ORDER,     /* TCP GET hits passed: an earlier request still waits on memcached */
	KV_TCP_PASS_LARGE,     /* TCP GET hits passed: the reply exceeds the staging buffer */
	KV_TCP_PASS_SPLIT,     /* TCP requests split across segments, passed */
	KV_TCP_BLIND,          /* connections whose stream could not be followed: passed from then on */
	KV_TCP_FILLS,          /* values stored from memcached's TCP GET replies */
	KV_TCP_REPLIES,        /* memcached's TCP replies counted (order) */
	KV_TCP_STAGE_LOST,     /* a staged kernel reply could not be swapped in (no memory) */
	KV_TCP_PASS_MIXED,     /* TCP GET hits passed with their segment: it held a miss or another command */
	KV_TCP_PASS_FIRST,     /* TCP GET hits passed before memcached's first reply on their connection */
	KV_STAT_MAX = 40,
};

#endif /* CISTERN_KV_H */
