/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/pool.bpf.h - Kerby: variable-length objects for any BPF program,
 * as chains of fixed-size blocks in BPF maps.
 *
 * LAYOUT
 *   pool_index   ARRAY[3] u64, mmapable. [0]: last block generation handed out,
 *                [1]: last version number, [2]: slots of pool_blocks ever
 *                taken fresh. Advanced only by atomic fetch-add, never
 *                decremented.
 *   pool_blocks  ARRAY slot -> [u64 index][pool_block_size bytes][u64 index].
 *                max_entries is the pool capacity in blocks. A block index is
 *                (generation << 32 | slot): the slot says where the block
 *                lives, the generation makes the index unique (2^32 of them
 *                per slot's lifetime), so a stale index never matches a slot
 *                that was freed and taken again. A freed block's header and
 *                trailer are zero.
 *   pool_slots   QUEUE of u32: freed slots, taken again before fresh ones
 *                (pool_index[2]). The paper's pool is a hash map keyed by the
 *                index; an array lookup is inlined by the JIT, where a hash
 *                lookup per block cost a GET of a 1 KiB value in 128-byte
 *                blocks a third of its time (docs/kerby-kv.md).
 *   pool_zero    PERCPU_ARRAY[1] of one zeroed block, copied over a slot when
 *                it is taken: a new block reads as zeros.
 *   pool_stats   PERCPU_ARRAY of enum pool_stat counters.
 *   Your allocation map: object id -> a value holding a struct pool_ref (the
 *   object's length, block count and block indices), a bpf_spin_lock and
 *   whatever metadata you need. Define CISTERN_POOL_OBJECTS to get a generic
 *   one, pool_objects (u64 id -> struct pool_object), and the pool_obj_* API.
 *
 *   The loader sets pool_block_size (a multiple of 8, 16..4096) and
 *   pool_max_blocks (<= CISTERN_POOL_MAX_BLOCKS) in .rodata, and sizes the maps
 *   to match: pool_blocks and pool_zero value_size = pool_block_size + 16.
 *   Because .rodata is frozen, the verifier sees both as constants, and every
 *   copy bound below is proved from them.
 *
 * CONCURRENCY
 *   No helper may be called while a bpf_spin_lock is held, so nothing that
 *   allocates or frees happens under the lock. A writer:
 *     1. pool_alloc(): takes slots (a freed one from pool_slots, else a fresh
 *        one) and fresh generations (fetch-add), stamps the blocks; fills
 *        them. Nobody else can see them yet.
 *     2. under the object's lock, swaps in the new pool_ref and takes out the
 *        old one (a plain memory copy, no helper).
 *     3. pool_free() on the old pool_ref, after unlocking.
 *   Published blocks are therefore never written again: a block index names
 *   one immutable piece of one version. A reader copies the pool_ref under the
 *   lock (a snapshot), then copies each block; a block that is gone, or whose
 *   index header/trailer no longer matches after the copy (the element was
 *   recycled), means a writer replaced that version: the reader retries from a
 *   new snapshot a bounded number of times (POOL_READ_RETRIES), then reports a
 *   miss. It can never return bytes of two versions. A free clears a block's
 *   stamp with compare-and-swap before its slot goes back to pool_slots, so
 *   two frees of one block cannot queue its slot twice.
 *   An element of the allocation map can be deleted and recycled for another
 *   id under a writer's feet; struct pool_object therefore carries its id and a
 *   dead flag, checked under the lock before publishing.
 *   Per-CPU data is not private to a program that can be preempted (task
 *   context programs such as SYSCALL ones run with migration, not
 *   preemption, disabled) or interrupted by a softirq program on the same CPU: pool_stats counters are added
 *   atomically, and each pool_obj_* call owns the per-CPU scratch through a
 *   busy flag (a second caller on the CPU gets -EBUSY instead of overwriting
 *   the first one's unpublished pool_ref).
 *
 * FAILURE
 *   A full pool or allocation map, or an object over pool_max_blocks blocks,
 *   fails the call with -ENOSPC / -E2BIG; blocks already created are deleted
 *   (rollback) and every case is counted in pool_stats. -EAGAIN: a concurrent
 *   writer or free won (nothing changed); -EBUSY: the CPU's scratch was in use.
 *
 * USE FROM YOUR OWN PROGRAM
 *   #define CISTERN_POOL_MAX_BLOCKS 8     (optional)
 *   #define CISTERN_POOL_OBJECTS          (optional: generic allocation map)
 *   #include "cistern/pool.bpf.h"
 *   then pool_obj_write()/pool_obj_read()/pool_obj_resize()/pool_obj_free(),
 *   or build your own allocation map from pool_alloc(), pool_block_get(),
 *   pool_block_intact() and pool_free() as bpf/kv/kv.bpf.c does. To call
 *   them from user space, wrap them in CISTERN_CALL programs
 *   (cistern/call.bpf.h), as bpf/pool/pool.bpf.c does. From Go, use
 *   package pool (github.com/cistern-ebpf/cistern/pool) to size the maps and
 *   read statistics; examples/execlog is a complete small user.
 */
#ifndef CISTERN_POOL_BPF_H
#define CISTERN_POOL_BPF_H

#include <bpf/bpf_helpers.h>
#include "cistern/pool.h"

#ifndef POOL_READ_RETRIES
#define POOL_READ_RETRIES 4
#endif

#define POOL_ENOSPC 28
#define POOL_E2BIG 7
#define POOL_ENOENT 2
#define POOL_EAGAIN 11
#define POOL_EINVAL 22
#define POOL_EBUSY 16
#define POOL_EEXIST 17

/* Set by the loader; frozen, so constants to the verifier. */
const volatile __u32 pool_block_size = 128;
const volatile __u32 pool_max_blocks = CISTERN_POOL_MAX_BLOCKS;
const volatile __u32 pool_capacity = 1024; /* pool_blocks' max_entries */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} pool_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);  /* capacity in blocks: set by the loader */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 128 + 2 * POOL_BLOCK_HDR); /* set by the loader */
} pool_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 1024); /* capacity in blocks: set by the loader */
	__uint(key_size, 0);
	__uint(value_size, sizeof(__u32));
} pool_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 128 + 2 * POOL_BLOCK_HDR); /* set by the loader */
} pool_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, POOL_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pool_stats SEC(".maps");

static __always_inline void pool_stat_add(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&pool_stats, &stat);

	/* Atomic although per-CPU: a program in task context (SYSCALL, or any
	 * program on a preemptible kernel) can be preempted or interrupted
	 * between the load and the store by another program on this CPU. */
	if (v)
		__sync_fetch_and_add(v, n);
}

/* Blocks needed for len bytes; more than pool_max_blocks means too big. */
static __always_inline __u32 pool_blocks_for(__u32 len)
{
	/* In 64 bits: len + pool_block_size - 1 must not wrap for len near 4 GiB
	 * (that made a huge len look like 0 blocks instead of oversize). */
	return ((__u64)len + pool_block_size - 1) / pool_block_size;
}

/* Largest object the pool stores. */
static __always_inline __u32 pool_max_len(void)
{
	return pool_block_size * pool_max_blocks;
}

/* Reserves n consecutive numbers from counter which (0 blocks, 1 versions);
 * returns the first. Never 0. */
static __always_inline __u64 pool_reserve(__u32 which, __u64 n)
{
	__u64 *ctr = bpf_map_lookup_elem(&pool_index, &which);

	if (!ctr)
		return 0;
	return __sync_fetch_and_add(ctr, n) + 1;
}

/* The block stored under idx, or NULL if it is gone or was recycled. Its
 * payload starts POOL_BLOCK_HDR bytes in and is pool_block_size long. */
static __always_inline __u8 *pool_block_get(__u64 idx)
{
	__u32 slot = (__u32)idx;
	__u8 *b = bpf_map_lookup_elem(&pool_blocks, &slot);

	if (!b || *(__u64 *)b != idx)
		return NULL;
	return b;
}

/* After copying out of block b: true if it still is block idx, so the copy
 * holds that block's bytes. Header and trailer are both checked so a recycling
 * copy is caught from either end. */
static __always_inline int pool_block_intact(__u8 *b, __u64 idx)
{
	asm volatile("" ::: "memory"); /* reload after the copy */
	return *(volatile __u64 *)b == idx &&
	       *(volatile __u64 *)(b + POOL_BLOCK_HDR + pool_block_size) == idx;
}

/* Takes a slot for a new block: a freed one, else a fresh one; -1 if full. */
static __always_inline __s64 pool_slot_take(void)
{
	__u32 slot, k = 2;
	__u64 *fresh, n;

	if (bpf_map_pop_elem(&pool_slots, &slot) == 0)
		return slot;
	fresh = bpf_map_lookup_elem(&pool_index, &k);
	if (!fresh || *fresh >= pool_capacity)
		return -1;
	n = __sync_fetch_and_add(fresh, 1);
	if (n < pool_capacity)
		return n;
	return -1;
}

/* Frees block idx: clears its stamp (only one caller can win the
 * compare-and-swap) and queues its slot. 0, or -1 if it was not block idx.
 * A global function: verified once, not once per block of every caller. */
__attribute__((noinline)) int pool_block_put(__u64 idx)
{
	__u32 slot = (__u32)idx;
	__u8 *b = bpf_map_lookup_elem(&pool_blocks, &slot);

	if (!b || idx == 0 || __sync_val_compare_and_swap((__u64 *)b, idx, 0) != idx)
		return -1;
	*(volatile __u64 *)(b + POOL_BLOCK_HDR + pool_block_size) = 0;
	if (bpf_map_push_elem(&pool_slots, &slot, 0))
		pool_stat_add(POOL_STAT_SLOTS_LOST, 1); /* cannot happen: room for every slot */
	return 0;
}

/* Makes a new block of generation gen on a taken slot, zeroed and stamped:
 * its index, or 0 when the pool is full. Global, as pool_block_put. */
__attribute__((noinline)) __u64 pool_block_new(__u64 gen)
{
	__u32 zk = 0, s32;
	__u8 *zero = bpf_map_lookup_elem(&pool_zero, &zk), *b;
	__s64 slot;
	__u64 idx;

	if (!zero)
		return 0;
	slot = pool_slot_take();
	if (slot < 0)
		return 0;
	s32 = (__u32)slot;
	/* A taken slot holds its last user's bytes: new blocks read as zeros
	 * (a resize's growth, a short last block). */
	b = bpf_map_lookup_elem(&pool_blocks, &s32);
	if (!b || bpf_map_update_elem(&pool_blocks, &s32, zero, BPF_ANY)) {
		bpf_map_push_elem(&pool_slots, &s32, 0);
		return 0;
	}
	idx = gen << 32 | s32;
	*(__u64 *)b = idx;
	*(__u64 *)(b + POOL_BLOCK_HDR + pool_block_size) = idx;
	return idx;
}

/* Deletes the blocks of ref (the old version after a swap, or a rollback). */
static __always_inline void pool_free(struct pool_ref *ref)
{
	__u32 n = ref->nblocks, missing = 0;

	if (n > CISTERN_POOL_MAX_BLOCKS)
		n = CISTERN_POOL_MAX_BLOCKS;
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= n)
			break;
		/* A block that is not there was never ours: count it apart. The
		 * count of freed blocks is n - missing, computed after the loop so
		 * that no per-iteration counter splits the verifier's states. */
		if (pool_block_put(ref->idx[i]))
			missing = 1;
	}
	ref->nblocks = 0;
	if (missing) {
		/* Never expected: flagged, and blocks_freed is left alone rather
		 * than guessed. */
		pool_stat_add(POOL_STAT_FREE_MISSES, 1);
		return;
	}
	if (n)
		pool_stat_add(POOL_STAT_BLOCKS_FREED, n);
}

/* Creates blocks [from, to) of ref with fresh indices. On failure frees
 * the blocks it created (earlier ones belong to the caller). */
static __always_inline int pool_add_blocks(struct pool_ref *ref, __u32 from, __u32 to)
{
	__u64 base;

	if (to <= from)
		return 0;
	base = pool_reserve(0, to - from);
	if (!base)
		return -POOL_EINVAL;
	__u32 made = from; /* blocks [from, made) exist */

	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		__u64 idx;

		if (i < from)
			continue;
		if (i >= to)
			break;
		idx = pool_block_new(base + i - from);
		if (!idx)
			break;
		ref->idx[i] = idx;
		made = i + 1;
	}
	if (made == to) {
		ref->nblocks = to;
		pool_stat_add(POOL_STAT_BLOCKS_ALLOCATED, to - from);
		return 0;
	}
	/* Roll back the blocks this call created, in a loop of its own: one
	 * nested in the one above would cost the verifier MAX_BLOCKS^2. */
	for (__u32 j = 0; j < CISTERN_POOL_MAX_BLOCKS; j++) {
		if (j < from)
			continue;
		if (j >= made)
			break;
		pool_block_put(ref->idx[j]);
	}
	pool_stat_add(POOL_STAT_POOL_FULL, 1);
	pool_stat_add(POOL_STAT_ROLLBACKS, 1);
	ref->nblocks = from;
	return -POOL_ENOSPC;
}

/* Builds in ref a new, unpublished version of len bytes on fresh blocks.
 * Fill it through pool_block_get(ref->idx[i]) + POOL_BLOCK_HDR. */
static __always_inline int pool_alloc(struct pool_ref *ref, __u32 len)
{
	__u32 n = pool_blocks_for(len);

	ref->nblocks = 0;
	if (n > pool_max_blocks || n > CISTERN_POOL_MAX_BLOCKS) {
		pool_stat_add(POOL_STAT_OVERSIZE, 1);
		return -POOL_E2BIG;
	}
	ref->len = len;
	ref->ver = pool_reserve(1, 1);
	return pool_add_blocks(ref, 0, n);
}

/* Builds in out a version of in resized to newlen: the blocks both share are
 * kept (they are immutable, so old readers stay safe), growth gets fresh
 * blocks, and the blocks past the new end are put in drop, to pool_free()
 * once out is published. Only the blocks that change are (de)allocated. */
static __always_inline int pool_resize(struct pool_ref *out, const struct pool_ref *in,
				       __u32 newlen, struct pool_ref *drop)
{
	__u32 n = pool_blocks_for(newlen), have = in->nblocks, d;
	int err;

	drop->nblocks = 0;
	out->nblocks = 0;
	if (n > pool_max_blocks || n > CISTERN_POOL_MAX_BLOCKS) {
		pool_stat_add(POOL_STAT_OVERSIZE, 1);
		return -POOL_E2BIG;
	}
	if (have > CISTERN_POOL_MAX_BLOCKS)
		return -POOL_EINVAL;
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= have)
			break;
		if (i < n) {
			out->idx[i] = in->idx[i];
			continue;
		}
		/* A bounds check, not a mask: CISTERN_POOL_MAX_BLOCKS need not be a
		 * power of two. d < i < CISTERN_POOL_MAX_BLOCKS always holds. */
		d = drop->nblocks;
		if (d < CISTERN_POOL_MAX_BLOCKS) {
			drop->idx[d] = in->idx[i];
			drop->nblocks = d + 1;
		}
	}
	out->len = newlen;
	out->ver = pool_reserve(1, 1);
	if (n <= have) {
		out->nblocks = n;
		return 0;
	}
	out->nblocks = have;
	err = pool_add_blocks(out, have, n);
	if (err)
		out->nblocks = 0; /* the shared blocks are not ours to free */
	return err;
}

/* Frees only the blocks resize added to out (used when publishing fails). */
static __always_inline void pool_resize_undo(struct pool_ref *out, const struct pool_ref *in)
{
	__u32 freed = 0, have = in->nblocks;

	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= out->nblocks)
			break;
		if (i < have)
			continue;
		if (pool_block_put(out->idx[i]) == 0)
			freed++;
	}
	pool_stat_add(POOL_STAT_BLOCKS_FREED, freed);
}

#ifdef CISTERN_POOL_OBJECTS
/*
 * Generic objects: u64 id -> struct pool_object. The data of writes and
 * reads lives in a caller's buffer that is a map value of at least
 * pool_max_len() bytes (e.g. a staging array), so every block copy is proved
 * in bounds by the buffer's size.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set by the loader */
	__type(key, __u64);
	__type(value, struct pool_object);
} pool_objects SEC(".maps");

/* Per-CPU scratch: pool_refs are too big for a 512-byte stack. busy makes
 * each pool_obj_* call own it: per-CPU data is only private to a program
 * that nothing else on the CPU can run in the middle of, and a task-context
 * program (SYSCALL, or any program on a preemptible kernel) runs with
 * migration, not preemption, disabled; a softirq program can interrupt it.
 * Sharing the scratch would let a second writer overwrite the first one's
 * unpublished pool_ref, which then fills and publishes the second one's
 * blocks. A caller that finds it busy fails with -EBUSY (counted). */
struct pool_scratch {
	__u32 busy;
	__u32 pad;
	struct pool_ref a, b, c;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pool_scratch);
} pool_scratch_map SEC(".maps");

/* Takes this CPU's scratch, or NULL if another caller on this CPU holds it. */
static __always_inline struct pool_scratch *pool_scratch_get(void)
{
	__u32 k = 0;
	struct pool_scratch *s = bpf_map_lookup_elem(&pool_scratch_map, &k);

	if (!s)
		return NULL;
	if (__sync_val_compare_and_swap(&s->busy, 0, 1) != 0) {
		pool_stat_add(POOL_STAT_SCRATCH_BUSY, 1);
		return NULL;
	}
	return s;
}

static __always_inline void pool_scratch_put(struct pool_scratch *s)
{
	asm volatile("" ::: "memory"); /* every use of s comes before */
	*(volatile __u32 *)&s->busy = 0;
}

/* Finds or creates the object id; on NULL, *err says why: -ENOENT (absent,
 * !create), -ENOSPC (allocation map full) or -EAGAIN (created, then freed
 * by someone else before we could look it up). */
static __always_inline struct pool_object *pool_obj_find(__u64 id, int create, int *err)
{
	struct pool_object *o = bpf_map_lookup_elem(&pool_objects, &id);
	struct pool_object fresh = { .id = id };
	long r;

	*err = 0;
	if (o)
		return o;
	if (!create) {
		*err = -POOL_ENOENT;
		return NULL;
	}
	r = bpf_map_update_elem(&pool_objects, &id, &fresh, BPF_NOEXIST);
	o = bpf_map_lookup_elem(&pool_objects, &id);
	if (o)
		return o;
	if (r && r != -POOL_EEXIST) {
		pool_stat_add(POOL_STAT_OBJECTS_FULL, 1);
		*err = -POOL_ENOSPC;
	} else {
		pool_stat_add(POOL_STAT_LOST_RACES, 1);
		*err = -POOL_EAGAIN;
	}
	return NULL;
}

/* Finds or creates the object id (NULL: see pool_obj_find). */
static __always_inline struct pool_object *pool_obj_get(__u64 id, int create)
{
	int err;

	return pool_obj_find(id, create, &err);
}

/* Swaps ref into o under its lock; on success ref holds the old version to
 * free. Fails (-EAGAIN) when o died or was recycled for another id. */
static __always_inline int pool_obj_publish(struct pool_object *o, __u64 id, struct pool_ref *ref,
					    struct pool_ref *old)
{
	int ok;

	bpf_spin_lock(&o->lock);
	ok = !o->dead && o->id == id;
	if (ok) {
		__builtin_memcpy(old, &o->ref, sizeof(*old));
		__builtin_memcpy(&o->ref, ref, sizeof(*ref));
	}
	bpf_spin_unlock(&o->lock);
	if (!ok) {
		pool_stat_add(POOL_STAT_LOST_RACES, 1);
		return -POOL_EAGAIN;
	}
	return 0;
}

/* Copies n <= pool_block_size bytes between a block and a buffer. */
static __always_inline int pool_copy(void *dst, __u32 n, const void *src)
{
	if (n > pool_block_size)
		return -POOL_EINVAL;
	return bpf_probe_read_kernel(dst, n, src);
}

static __always_inline int __pool_obj_write(struct pool_scratch *s, __u64 id, const __u8 *buf,
					    __u32 len)
{
	struct pool_object *o;
	__u32 bs = pool_block_size;
	int err;

	err = pool_alloc(&s->a, len);
	if (err)
		return err;
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		__u32 off = i * bs, n;
		__u8 *b;

		if (i >= s->a.nblocks)
			break;
		n = len - off < bs ? len - off : bs;
		b = pool_block_get(s->a.idx[i]);
		err = -POOL_EINVAL;
		if (!b || off > pool_max_len() - bs)
			goto undo;
		if (pool_copy(b + POOL_BLOCK_HDR, n, buf + off))
			goto undo;
	}
	o = pool_obj_find(id, 1, &err);
	if (!o)
		goto undo;
	err = pool_obj_publish(o, id, &s->a, &s->b);
	if (err)
		goto undo;
	pool_free(&s->b);
	return 0;
undo:
	pool_free(&s->a);
	pool_stat_add(POOL_STAT_ROLLBACKS, 1);
	return err;
}

static __always_inline int __pool_obj_read(struct pool_scratch *s, __u64 id, __u8 *buf)
{
	struct pool_object *o;
	__u32 bs = pool_block_size;

	for (int attempt = 0; attempt < POOL_READ_RETRIES; attempt++) {
		int good = 1, live;

		o = bpf_map_lookup_elem(&pool_objects, &id);
		if (!o)
			return -POOL_ENOENT;
		bpf_spin_lock(&o->lock);
		live = !o->dead && o->id == id;
		__builtin_memcpy(&s->c, &o->ref, sizeof(s->c));
		bpf_spin_unlock(&o->lock);
		if (!live || !s->c.ver)
			return -POOL_ENOENT;
		for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
			__u32 off = i * bs, n;
			__u64 idx;
			__u8 *b;

			if (i >= s->c.nblocks)
				break;
			idx = s->c.idx[i];
			n = s->c.len - off < bs ? s->c.len - off : bs;
			b = pool_block_get(idx);
			if (!b || off > pool_max_len() - bs ||
			    pool_copy(buf + off, n, b + POOL_BLOCK_HDR) ||
			    !pool_block_intact(b, idx)) {
				good = 0;
				break;
			}
		}
		if (good)
			return s->c.len;
		pool_stat_add(POOL_STAT_TORN_RETRIES, 1);
	}
	pool_stat_add(POOL_STAT_READ_FAILURES, 1);
	return -POOL_EAGAIN;
}

static __always_inline int __pool_obj_resize(struct pool_scratch *s, __u64 id, __u32 newlen)
{
	struct pool_object *o;
	int err, ok;

	o = bpf_map_lookup_elem(&pool_objects, &id);
	if (!o)
		return -POOL_ENOENT;
	bpf_spin_lock(&o->lock);
	__builtin_memcpy(&s->c, &o->ref, sizeof(s->c));
	bpf_spin_unlock(&o->lock);
	err = pool_resize(&s->a, &s->c, newlen, &s->b);
	if (err)
		return err;
	/* Publish only if nobody changed the object since the snapshot. */
	bpf_spin_lock(&o->lock);
	ok = !o->dead && o->id == id && o->ref.ver == s->c.ver;
	if (ok)
		__builtin_memcpy(&o->ref, &s->a, sizeof(s->a));
	bpf_spin_unlock(&o->lock);
	if (!ok) {
		pool_resize_undo(&s->a, &s->c);
		pool_stat_add(POOL_STAT_LOST_RACES, 1);
		return -POOL_EAGAIN;
	}
	pool_free(&s->b);
	return 0;
}

static __always_inline int __pool_obj_free(struct pool_scratch *s, __u64 id)
{
	struct pool_object *o;

	o = bpf_map_lookup_elem(&pool_objects, &id);
	if (!o)
		return -POOL_ENOENT;
	bpf_spin_lock(&o->lock);
	if (o->dead || o->id != id) {
		bpf_spin_unlock(&o->lock);
		return -POOL_ENOENT;
	}
	__builtin_memcpy(&s->b, &o->ref, sizeof(s->b));
	__builtin_memset(&o->ref, 0, sizeof(o->ref));
	o->dead = 1;
	bpf_spin_unlock(&o->lock);
	bpf_map_delete_elem(&pool_objects, &id);
	pool_free(&s->b);
	return 0;
}

/*
 * The API. Each call owns this CPU's scratch for its duration and returns
 * -EBUSY if another call on the same CPU (one it preempted or interrupted)
 * holds it; retry later.
 */

/* Writes len bytes from buf (a map value of >= pool_max_len() bytes) as a
 * new version of object id, creating the object if needed. 0, -E2BIG,
 * -ENOSPC (pool or allocation map full), -EAGAIN (the object was freed
 * meanwhile: nothing written) or -EBUSY. */
static __always_inline int pool_obj_write(__u64 id, const __u8 *buf, __u32 len)
{
	struct pool_scratch *s = pool_scratch_get();
	int ret;

	if (!s)
		return -POOL_EBUSY;
	ret = __pool_obj_write(s, id, buf, len);
	pool_scratch_put(s);
	return ret;
}

/* Reads object id into buf (a map value of >= pool_max_len() bytes).
 * Returns its length, -ENOENT, -EAGAIN when every retry met a concurrent
 * writer (counted as a read failure), or -EBUSY. Never returns a torn value. */
static __always_inline int pool_obj_read(__u64 id, __u8 *buf)
{
	struct pool_scratch *s = pool_scratch_get();
	int ret;

	if (!s)
		return -POOL_EBUSY;
	ret = __pool_obj_read(s, id, buf);
	pool_scratch_put(s);
	return ret;
}

/* Resizes object id to newlen, (de)allocating only the blocks that change.
 * Bytes past the old length read as zero in new blocks but are unspecified in
 * the old last block (blocks are immutable: a shrink does not clear it).
 * 0, -ENOENT, -E2BIG, -ENOSPC, -EAGAIN (changed meanwhile) or -EBUSY. */
static __always_inline int pool_obj_resize(__u64 id, __u32 newlen)
{
	struct pool_scratch *s = pool_scratch_get();
	int ret;

	if (!s)
		return -POOL_EBUSY;
	ret = __pool_obj_resize(s, id, newlen);
	pool_scratch_put(s);
	return ret;
}

/* Frees object id: empties and kills it under the lock, deletes the entry,
 * then frees its blocks. 0, -ENOENT or -EBUSY. */
static __always_inline int pool_obj_free(__u64 id)
{
	struct pool_scratch *s = pool_scratch_get();
	int ret;

	if (!s)
		return -POOL_EBUSY;
	ret = __pool_obj_free(s, id);
	pool_scratch_put(s);
	return ret;
}
#endif /* CISTERN_POOL_OBJECTS */

#endif /* CISTERN_POOL_BPF_H */
