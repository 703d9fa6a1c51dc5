/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/accum.bpf.h - the accumulating channel: small fragments of a byte
 * stream (SSL_write/SSL_read, send/recv ...) are batched per connection in
 * the kernel, and each batch crosses to user space as ONE ring-buffer record
 * sized to what it carries, with its metadata once.
 *
 * LAYOUT
 *   accum_conns  HASH u64 conn_id -> struct accum_conn (BPF_F_NO_PREALLOC:
 *                an element deleted on close is not reused under the feet of
 *                a program still holding it). value_size = sizeof(struct
 *                accum_conn) + 2 * accum_flush_size, set by the loader. The
 *                value holds the record header (struct accum_rec) immediately
 *                followed by the batch buffer, so a flush is a single
 *                bpf_ringbuf_output() of header + batch: reserved size is
 *                exactly 48 + batch bytes, never a fixed-size slot.
 *   accum_zero   ARRAY[1] of one zeroed accum_conn, the template for new ones.
 *   accum_ring   RINGBUF (size set by the loader).
 *   accum_wake   ARRAY[2] u64: [0] ring bytes written since the last forced
 *                wakeup, [1] when the first record since went out without
 *                a wakeup (bpf_ktime_get_ns(); 0: none).
 *   accum_stats  PERCPU_ARRAY of enum accum_stat counters.
 *   accum_sweeper ARRAY[1] with the bpf_timer of the latency bound.
 *
 *   A batch is a sequence of segments: a 4-byte header (bit 15 direction,
 *   bits 0..14 length; bit 15 "several fragments", bits 0..14 the time of
 *   the last fragment in microseconds after the record's first_ns) and that
 *   many bytes. Consecutive fragments in the same direction extend the open
 *   segment; a change of direction opens a new one, so a request/response
 *   exchange stays in one batch for 4 bytes per turn and each turn keeps
 *   its own time (a batch-wide first/last time made query latencies only
 *   as exact as the batching).
 *
 * THE BOUNDS PROOF
 *   The loader sets accum_flush_size = F (a power of two, 64..16384) in
 *   .rodata; .rodata is frozen, so F and the mask F - 1 are constants to the
 *   verifier. The buffer is 2F bytes. Every copy into it is at
 *       off = fill & (F - 1)           in [0, F - 1]
 *   of        n = ((n - 1) & (F - 1)) + 1  in [1, F]    (after checking n > 0)
 *   so off + n <= 2F - 1 < 2F: in bounds whatever the verifier believes of
 *   fill and n. At run time the masks change nothing: fill < F whenever we
 *   copy (a batch is flushed as soon as it reaches F) and n <= F - fill. A
 *   segment header is written at fill & (F - 1) too (4 bytes, <= F + 3). A
 *   flush outputs sizeof(accum_rec) + (fill & (2F - 1)) bytes from the
 *   header, <= 48 + 2F - 1: within the value. The verifier never has to
 *   relate fill to n, which it cannot do.
 *
 * FLUSHES
 *   A batch goes out when it reaches F bytes; when the pid, tid or protocol
 *   changes (the header cannot say two of them); on close (with ACCUM_F_CLOSE,
 *   even empty, so the reader knows the stream ended); and by the latency
 *   bound: accum_start() arms a bpf_timer that fires every accum_latency_ns/2
 *   and flushes every batch at least that old, so no byte waits more than
 *   about accum_latency_ns (default 10 ms). The timer lives in its own map
 *   because tracing programs (uprobes, tracepoints) may not use a map with a
 *   bpf_timer: accum_conns stays usable from them. A fragment larger than F
 *   flushes the batch before it and goes out alone, chunked into records of
 *   F bytes (ACCUM_F_CHUNK).
 *
 * WAKEUPS
 *   Records are written with BPF_RB_NO_WAKEUP until accum_wakeup_bytes have
 *   accumulated since the last wakeup, then with BPF_RB_FORCE_WAKEUP; timer
 *   and close flushes always wake. A record written without a wakeup marks
 *   accum_wake[1] with its time once it is in the ring (a forced wakeup
 *   clears the mark: it follows every record before); the latency timer,
 *   seeing a mark at least half a latency bound old and unread ring bytes,
 *   wakes the reader (a one-record reservation, discarded with
 *   BPF_RB_FORCE_WAKEUP). So every record reaches a waiting reader within
 *   a latency bound without the reader polling: an idle reader sleeps until
 *   there is something to read, a busy one is woken at most once a bound.
 *   The mark is set after the record is committed, so a timer that clears
 *   it and wakes comes after the record: none is left behind.
 *
 * LOSS IS NEVER SILENT
 *   Each record takes the connection's next sequence number; a record the
 *   ring cannot take, a fragment dropped because its connection stayed busy,
 *   or a source that faults, consumes one too, so the reader sees a gap, and
 *   is counted (records and bytes) in accum_stats. A full connection table
 *   is counted (ACCUM_STAT_NO_CONN, LOST_BYTES) - there is no sequence to
 *   break.
 *
 * CONCURRENCY
 *   No bpf_spin_lock (helpers are needed while holding the batch, and
 *   tracepoint programs cannot take one): a connection is owned through its
 *   busy word (compare-and-swap). A writer spins a bounded number of times
 *   (ACCUM_SPIN inline, then up to ACCUM_SPIN_LONG in bpf_loop: under load
 *   the timer's CPU can be taken away mid-flush for longer than 10 us);
 *   the timer never spins (a busy batch is being worked on, and is looked at
 *   again half a latency bound later). Ownership is checked against the
 *   connection id and a dead flag set on close, so an element that went away
 *   is never written.
 *
 * USE FROM YOUR OWN PROGRAM
 *   #include "cistern/accum.bpf.h"
 *   accum_write(conn_id, (u64)src, len, ACCUM_PIDTID(pid, tid),
 *               ACCUM_META(dir, proto, is_user));
 *   accum_close(conn_id);
 *   and call the program accum_start once after loading (package accum
 *   does: Config.Apply, then Start; it is an XDP program run with
 *   BPF_PROG_TEST_RUN, see cistern/call.bpf.h, never attached). Both are global functions: the
 *   verifier checks them once however many hooks call them.
 */
#ifndef CISTERN_ACCUM_BPF_H
#define CISTERN_ACCUM_BPF_H

#include <bpf/bpf_helpers.h>
#include "cistern/accum.h"
#include "cistern/call.bpf.h"

#define ACCUM_ENOSPC 28
#define ACCUM_EBUSY 16
#define ACCUM_EFAULT 14
#define ACCUM_EINVAL 22

#ifndef ACCUM_SPIN
#define ACCUM_SPIN 512 /* ~10 us of compare-and-swap: outlasts a timer flush (one ring output) */
#endif
#ifndef ACCUM_SPIN_LONG
#define ACCUM_SPIN_LONG (1 << 17) /* then up to a few ms, in bpf_loop: an owner descheduled mid-flush */
#endif

#define ACCUM_PIDTID(pid, tid) (((__u64)(pid) << 32) | (__u32)(tid))
#define ACCUM_META(dir, proto, user) \
	(((dir) & 1) | (((__u32)(proto) & 0xff) << 8) | ((user) ? 0x10000 : 0))

/* Set by the loader; frozen, so constants to the verifier. */
const volatile __u32 accum_flush_size = 1024;     /* F: power of two */
const volatile __u64 accum_latency_ns = 10000000; /* latency bound */
const volatile __u64 accum_wakeup_bytes = 65536;  /* ring bytes per forced wakeup */

struct accum_conn {
	__u32 busy;
	__u32 state;    /* 0 fresh, 1 live, 2 dead */
	__u64 id;
	__u64 next_seq; /* last sequence number taken */
	__u32 fill;     /* batch bytes, segment headers included */
	__u32 payload;  /* fragment bytes in the batch */
	__u32 seg_off;  /* offset of the open segment's header */
	__u32 seg_len;
	__u8 seg_open;
	__u8 seg_dir;
	__u8 pad[6];
	struct accum_rec rec; /* the record header: buf must follow it */
	__u8 buf[];     /* 2 * accum_flush_size */
};

#define ACCUM_CONN_VALUE(f) (sizeof(struct accum_conn) + 2 * (f))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* set by the loader */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(__u64));
	__uint(value_size, ACCUM_CONN_VALUE(1024)); /* set by the loader */
} accum_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, ACCUM_CONN_VALUE(1024)); /* set by the loader */
} accum_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* set by the loader */
} accum_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} accum_wake SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ACCUM_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} accum_stats SEC(".maps");

struct accum_timer {
	struct bpf_timer t;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct accum_timer);
} accum_sweeper SEC(".maps");

static __always_inline void accum_stat_add(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&accum_stats, &stat);

	/* Atomic although per-CPU: a task-context program can be interrupted
	 * by the timer callback on the same CPU. */
	if (v)
		__sync_fetch_and_add(v, n);
}

/* BPF_RB_NO_WAKEUP until accum_wakeup_bytes ring bytes have piled up. */
static __always_inline __u64 accum_wake_flags(__u32 ring_bytes, int force)
{
	__u32 k = 0;
	__u64 *pending = bpf_map_lookup_elem(&accum_wake, &k);

	if (!pending)
		return 0;
	if (force || __sync_fetch_and_add(pending, ring_bytes) + ring_bytes >= accum_wakeup_bytes) {
		__u64 *since;

		__sync_lock_test_and_set(pending, 0);
		/* The wakeup follows this record, and so every one before. */
		k = 1;
		since = bpf_map_lookup_elem(&accum_wake, &k);
		if (since && *since)
			__sync_lock_test_and_set(since, 0);
		accum_stat_add(ACCUM_STAT_WAKEUPS, 1);
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* A record went out without a wakeup (after it is committed: see WAKEUPS):
 * the first since the last wakeup marks its time. */
static __always_inline void accum_mark_unwoken(void)
{
	__u32 k = 1;
	__u64 *since = bpf_map_lookup_elem(&accum_wake, &k);

	if (since && !*since)
		__sync_val_compare_and_swap(since, 0, bpf_ktime_get_ns() | 1);
}

/* From the latency timer: wakes the reader if a record went out without a
 * wakeup at least max_age ago and the ring still holds unread bytes. No
 * helper wakes a ring buffer's reader by itself: an 8-byte reservation
 * discarded with BPF_RB_FORCE_WAKEUP does, and the reader skips it. */
static __always_inline void accum_wake_late(__u64 max_age)
{
	__u32 k = 1;
	__u64 *since = bpf_map_lookup_elem(&accum_wake, &k);
	__u64 t;
	void *r;

	if (!since)
		return;
	t = *since;
	if (!t || bpf_ktime_get_ns() - t < max_age)
		return;
	if (__sync_val_compare_and_swap(since, t, 0) != t)
		return; /* cleared meanwhile */
	if (!bpf_ringbuf_query(&accum_ring, BPF_RB_AVAIL_DATA))
		return; /* read already */
	r = bpf_ringbuf_reserve(&accum_ring, 8, 0);
	if (!r) {
		/* Full: the reader was woken on the way (every
		 * accum_wakeup_bytes); look again next time all the same. */
		__sync_val_compare_and_swap(since, 0, t);
		return;
	}
	bpf_ringbuf_discard(r, BPF_RB_FORCE_WAKEUP);
	accum_stat_add(ACCUM_STAT_WAKEUPS, 1);
	accum_stat_add(ACCUM_STAT_LATE_WAKEUPS, 1);
}

/* Sends the batch of c (owned) as one record and empties it. Empty batches
 * are sent only when they carry ACCUM_F_CLOSE. */
static __always_inline void accum_emit(struct accum_conn *c, int force)
{
	__u32 F = accum_flush_size;
	__u32 fill = c->fill & (2 * F - 1);
	__u32 size = sizeof(struct accum_rec) + fill;
	__u32 ring = ((size + 7) & ~7U) + 8;
	__u64 flags;

	if (!fill && !(c->rec.flags & ACCUM_F_CLOSE))
		return;
	c->rec.len = fill;
	c->rec.seq = __sync_fetch_and_add(&c->next_seq, 1) + 1;
	flags = accum_wake_flags(ring, force);
	if (bpf_ringbuf_output(&accum_ring, &c->rec, size, flags)) {
		accum_stat_add(ACCUM_STAT_LOST_RECORDS, 1);
		accum_stat_add(ACCUM_STAT_LOST_BYTES, c->payload);
	} else {
		accum_stat_add(ACCUM_STAT_RECORDS, 1);
		accum_stat_add(ACCUM_STAT_RING_BYTES, ring);
		accum_stat_add(ACCUM_STAT_PAYLOAD_BYTES, c->payload);
		if (flags == BPF_RB_NO_WAKEUP)
			accum_mark_unwoken();
	}
	c->fill = 0;
	c->payload = 0;
	c->seg_open = 0;
	c->rec.flags = 0;
}

/* accum_emit() as a global function, checked once: connection id (owned). */
__attribute__((noinline)) int accum_emit_conn(__u64 id, __u32 force)
{
	struct accum_conn *c = bpf_map_lookup_elem(&accum_conns, &id);

	if (!c)
		return -ACCUM_EINVAL;
	accum_emit(c, force);
	return 0;
}

static __always_inline void accum_release(struct accum_conn *c)
{
	asm volatile("" ::: "memory"); /* every use of c comes before */
	*(volatile __u32 *)&c->busy = 0;
}

struct accum_spin {
	__u64 id;
	__u32 got;
};

static long accum_spin_cb(__u64 i, struct accum_spin *sp)
{
	struct accum_conn *c = bpf_map_lookup_elem(&accum_conns, &sp->id);

	if (!c)
		return 1;
	if (__sync_val_compare_and_swap(&c->busy, 0, 1) == 0) {
		sp->got = 1;
		return 1;
	}
	return 0;
}

/* Owns connection id: finds or creates it and takes its busy word. NULL:
 * *err says why (-ENOSPC: table full, -EBUSY: held elsewhere too long,
 * -EINVAL: absent and !create). */
static __always_inline struct accum_conn *accum_own(__u64 id, int create, int *err)
{
	struct accum_conn *c;
	__u32 zk = 0;

	*err = -ACCUM_EINVAL;
	for (int attempt = 0; attempt < 2; attempt++) {
		void *zero;
		int got = 0;

		c = bpf_map_lookup_elem(&accum_conns, &id);
		if (!c) {
			if (!create)
				return NULL;
			zero = bpf_map_lookup_elem(&accum_zero, &zk);
			if (!zero)
				return NULL;
			bpf_map_update_elem(&accum_conns, &id, zero, BPF_NOEXIST);
			c = bpf_map_lookup_elem(&accum_conns, &id);
			if (!c) {
				*err = -ACCUM_ENOSPC;
				return NULL;
			}
		}
		for (int i = 0; i < ACCUM_SPIN; i++) {
			if (__sync_val_compare_and_swap(&c->busy, 0, 1) == 0) {
				got = 1;
				break;
			}
		}
		if (!got) {
			/* The owner is slow (its CPU was taken away mid-flush, which
			 * a loaded machine does): keep trying, boundedly, rather than
			 * lose the fragment. */
			struct accum_spin sp = { .id = id };

			bpf_loop(ACCUM_SPIN_LONG, accum_spin_cb, &sp, 0);
			c = bpf_map_lookup_elem(&accum_conns, &id);
			if (!c) {
				if (sp.got)
					return NULL; /* cannot happen: an owned element stays */
				continue; /* closed and deleted meanwhile: look again */
			}
			got = sp.got;
		}
		if (!got) {
			*err = -ACCUM_EBUSY;
			return NULL;
		}
		if (c->state == 0) {
			c->state = 1;
			c->id = id;
		}
		if (c->state == 1 && c->id == id)
			return c;
		accum_release(c); /* dead: closed under us; look again */
	}
	*err = -ACCUM_EBUSY;
	return NULL;
}

/* One step of a write to connection id (owned): appends what fits of the
 * left bytes at src, flushing as needed; returns the bytes consumed or
 * -errno. how: bit 0 direction, bit 1 user source, bit 2 chunk (flush at
 * every step: a fragment larger than F). A global function: checked once. */
__attribute__((noinline)) int accum_step(__u64 id, __u64 src, __u32 left, __u32 how)
{
	__u32 F = accum_flush_size, fill, off, n, dir = how & 1;
	struct accum_conn *c;
	__u64 now, t;
	long r;

	if (!left)
		return 0;
	c = bpf_map_lookup_elem(&accum_conns, &id);
	if (!c)
		return -ACCUM_EINVAL;
	if (c->fill + ACCUM_SEG_HDR + 1 > F) {
		accum_emit_conn(id, 0);
		c = bpf_map_lookup_elem(&accum_conns, &id);
		if (!c)
			return -ACCUM_EINVAL;
	}
	fill = c->fill;
	now = bpf_ktime_get_ns();
	if (!c->payload)
		c->rec.first_ns = now;
	t = (now - c->rec.first_ns) / 1000;
	if (t > ACCUM_SEG_TSAT)
		t = ACCUM_SEG_TSAT;
	if (!c->seg_open || c->seg_dir != dir) {
		if (!fill)
			c->rec.dir = dir;
		c->seg_off = fill;
		c->seg_len = 0;
		c->seg_open = 1;
		c->seg_dir = dir;
		off = fill & (F - 1);
		c->buf[off] = 0; /* length 0 until the copy below lands */
		c->buf[off + 1] = dir ? (ACCUM_SEG_DIR >> 8) : 0;
		fill += ACCUM_SEG_HDR;
		c->fill = fill;
	}
	n = F - fill;
	if (n > left)
		n = left;
	if (!n || n > F) /* fill <= F - 1 here, so never */
		return -ACCUM_EINVAL;
	n = ((n - 1) & (F - 1)) + 1;
	off = fill & (F - 1);
	if (how & 2)
		r = bpf_probe_read_user(c->buf + off, n, (void *)src);
	else
		r = bpf_probe_read_kernel(c->buf + off, n, (void *)src);
	if (r) {
		/* The batch so far is good; the fragment's rest is lost. Send the
		 * batch and burn a sequence number so the reader sees the gap. */
		if (!c->seg_len) /* drop the header of the empty segment */
			c->fill = c->seg_off;
		c->seg_open = 0;
		accum_emit_conn(id, 0);
		c = bpf_map_lookup_elem(&accum_conns, &id);
		if (c) /* the gap follows the good bytes */
			__sync_fetch_and_add(&c->next_seq, 1);
		accum_stat_add(ACCUM_STAT_FAULTS, 1);
		accum_stat_add(ACCUM_STAT_LOST_BYTES, left);
		return -ACCUM_EFAULT;
	}
	/* The header is (re)written whole with every fragment: length and
	 * last time grow, and a fault above may have left it half written. */
	if (c->seg_len)
		t |= ACCUM_SEG_MULTI;
	c->seg_len += n;
	off = c->seg_off & (F - 1);
	c->buf[off] = c->seg_len & 0xff;
	c->buf[off + 1] = ((c->seg_len >> 8) & 0x7f) | (dir ? (ACCUM_SEG_DIR >> 8) : 0);
	c->buf[off + 2] = t & 0xff;
	c->buf[off + 3] = t >> 8;
	c->fill = fill + n;
	c->payload += n;
	c->rec.last_ns = now;
	if (how & 4)
		c->rec.flags |= ACCUM_F_CHUNK;
	if ((how & 4) || c->fill >= F)
		accum_emit_conn(id, 0);
	return n;
}

struct accum_steps {
	__u64 id;
	__u64 src;
	__u32 left;
	__u32 how;
	__s32 err;
};

static long accum_step_cb(__u64 i, struct accum_steps *s)
{
	int n = accum_step(s->id, s->src, s->left, s->how);

	if (n <= 0) {
		s->err = n;
		return 1;
	}
	s->src += n;
	s->left -= n;
	return s->left ? 0 : 1;
}

/* Appends len bytes at src (a user address if ACCUM_META's user bit is set,
 * else a kernel one) to connection conn_id. meta = ACCUM_META(dir, proto,
 * user), pidtid = ACCUM_PIDTID(pid, tid). Returns 0 or -errno; every byte
 * not delivered is counted. */
__attribute__((noinline)) int accum_write(__u64 conn_id, __u64 src, __u32 len, __u64 pidtid,
					  __u32 meta)
{
	__u32 F = accum_flush_size, pid = pidtid >> 32, tid = (__u32)pidtid;
	__u8 proto = (meta >> 8) & 0xff;
	struct accum_steps s = {
		.id = conn_id, .src = src, .left = len,
		.how = (meta & 1) | (((meta >> 16) & 1) << 1),
	};
	struct accum_conn *c;
	int err;

	if (!len)
		return 0;
	c = accum_own(conn_id, 1, &err);
	if (!c) {
		accum_stat_add(err == -ACCUM_EBUSY ? ACCUM_STAT_BUSY_DROPS : ACCUM_STAT_NO_CONN, 1);
		accum_stat_add(ACCUM_STAT_LOST_BYTES, len);
		if (err == -ACCUM_EBUSY) {
			c = bpf_map_lookup_elem(&accum_conns, &conn_id);
			if (c) /* burn a sequence number: the reader sees the gap */
				__sync_fetch_and_add(&c->next_seq, 1);
		}
		return err;
	}
	if (c->fill && (c->rec.pid != pid || c->rec.tid != tid || c->rec.proto != proto)) {
		accum_emit_conn(conn_id, 0);
		accum_stat_add(ACCUM_STAT_CONTEXT_FLUSHES, 1);
	}
	c->rec.conn_id = conn_id;
	c->rec.pid = pid;
	c->rec.tid = tid;
	c->rec.proto = proto;
	if (len > F) {
		accum_emit_conn(conn_id, 0);
		s.how |= 4;
	}
	/* Each step copies min(left, room) with room >= F - 3 >= F / 2 after a
	 * flush, so len / (F / 2) + 2 steps always suffice. */
	bpf_loop(len / (F / 2) + 2, accum_step_cb, &s, 0);
	accum_release(c);
	return s.err;
}

/* Flushes what conn_id holds and sends its ACCUM_F_CLOSE record, then
 * forgets it (the next write starts a new stream at sequence 1). */
__attribute__((noinline)) int accum_close(__u64 conn_id)
{
	struct accum_conn *c;
	int err;

	c = accum_own(conn_id, 0, &err);
	if (!c)
		return err;
	c->rec.conn_id = conn_id;
	if (!c->fill)
		c->rec.first_ns = c->rec.last_ns = bpf_ktime_get_ns();
	c->rec.flags |= ACCUM_F_CLOSE;
	accum_emit_conn(conn_id, 1);
	c->state = 2;
	accum_release(c);
	bpf_map_delete_elem(&accum_conns, &conn_id);
	return 0;
}

struct accum_sweep {
	__u64 now;
	__u64 max_age;
	__u64 flushed;
};

static long accum_sweep_elem(void *map, __u64 *key, struct accum_conn *c, struct accum_sweep *s)
{
	if (!c->fill || s->now - c->rec.first_ns < s->max_age)
		return 0;
	if (__sync_val_compare_and_swap(&c->busy, 0, 1) != 0)
		return 0; /* being written: looked at again next sweep */
	if (c->state == 1 && c->fill && s->now - c->rec.first_ns >= s->max_age) {
		c->rec.flags |= ACCUM_F_TIMER;
		accum_emit(c, 1);
		accum_stat_add(ACCUM_STAT_TIMER_FLUSHES, 1);
		s->flushed++;
	}
	accum_release(c);
	return 0;
}

/* Flushes every batch at least max_age_ns old; returns how many. */
__attribute__((noinline)) int accum_flush_aged(__u64 max_age_ns)
{
	struct accum_sweep s = { .now = bpf_ktime_get_ns(), .max_age = max_age_ns };

	bpf_for_each_map_elem(&accum_conns, accum_sweep_elem, &s, 0);
	return s.flushed;
}

static int accum_sweep_cb(void *map, __u32 *key, struct accum_timer *t)
{
	__u64 half = accum_latency_ns / 2;

	accum_flush_aged(half);
	accum_wake_late(half);
	bpf_timer_start(&t->t, half ? half : 1, 0);
	return 0;
}

/* Arms the latency bound (call once after loading; again is harmless).
 * a->ret: bpf_timer_start's result. */
CISTERN_CALL(accum_start, struct cistern_call_ret, a)
{
	__u32 k = 0;
	struct accum_timer *t = bpf_map_lookup_elem(&accum_sweeper, &k);
	__u64 half = accum_latency_ns / 2;

	if (!t) {
		a->ret = -ACCUM_EINVAL;
		return;
	}
	bpf_timer_init(&t->t, &accum_sweeper, 1 /* CLOCK_MONOTONIC */);
	bpf_timer_set_callback(&t->t, accum_sweep_cb);
	a->ret = bpf_timer_start(&t->t, half ? half : 1, 0);
}

#endif /* CISTERN_ACCUM_BPF_H */
