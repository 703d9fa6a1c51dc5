/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/pool.h - Kerby pool structures that cross the BPF/user boundary.
 * Mirrored in Go by package pool (pool/layout.go); keep the two in step.
 */
#ifndef CISTERN_POOL_H
#define CISTERN_POOL_H

/* Most blocks one object may chain: compile-time size of struct pool_ref.
 * The run-time cap (pool_max_blocks) may be lower. At most 64. */
#ifndef CISTERN_POOL_MAX_BLOCKS
#define CISTERN_POOL_MAX_BLOCKS 8
#endif

/* A block in pool_blocks: its own index before and after the payload, so a
 * reader can prove after copying that the block was not freed and reused
 * underneath it (a freed slot may be taken again at once).
 * Map value size = pool_block_size + 2 * 8. */
#define POOL_BLOCK_HDR 8

/* One version of an object's content: which blocks, in order, hold it. */
struct pool_ref {
	__u64 ver;     /* unique per version (0: no content) */
	__u32 len;     /* payload bytes */
	__u32 nblocks; /* used entries of idx[] */
	__u64 idx[CISTERN_POOL_MAX_BLOCKS]; /* block indices; 0 is null */
};

/* Value of the generic allocation map pool_objects (CISTERN_POOL_OBJECTS). */
struct pool_object {
	struct bpf_spin_lock lock;
	__u32 dead; /* set under the lock just before the entry is deleted */
	__u64 id;   /* the key: lets a writer notice the element was recycled */
	struct pool_ref ref;
};

/* Per-CPU counters in pool_stats. */
enum pool_stat {
	POOL_STAT_BLOCKS_ALLOCATED = 0,
	POOL_STAT_BLOCKS_FREED,
	POOL_STAT_POOL_FULL,     /* a block could not be created: pool at capacity */
	POOL_STAT_OBJECTS_FULL,  /* the allocation map is full */
	POOL_STAT_OVERSIZE,      /* object longer than pool_max_blocks blocks */
	POOL_STAT_ROLLBACKS,     /* partial allocations undone */
	POOL_STAT_TORN_RETRIES,  /* a read met a freed or recycled block and retried */
	POOL_STAT_READ_FAILURES, /* a read gave up after its retries */
	POOL_STAT_LOST_RACES,    /* a finished version was dropped: the object changed or died meanwhile */
	POOL_STAT_SCRATCH_BUSY,  /* a pool_obj_* call found this CPU's scratch in use (a preempted or
				  * interrupted caller on the same CPU) and returned -EBUSY */
	POOL_STAT_FREE_MISSES,   /* a free met blocks already gone (should stay 0): blocks_freed not updated */
	POOL_STAT_SLOTS_LOST,    /* a freed slot could not be queued again (should stay 0) */
	POOL_STAT_MAX = 16,
};

/* Argument struct of the pool_* CISTERN_CALL programs (bpf/pool/pool.bpf.c). */
struct pool_op_args {
	__u64 id;
	__u32 len;  /* bytes to write / new length / capacity for reads */
	__u32 slot; /* staging slot holding the data */
	__s32 ret;  /* result: length read, 0, or -errno */
	__u32 pad;
};

#endif /* CISTERN_POOL_H */
