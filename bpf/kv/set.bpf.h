/* SPDX-License-Identifier: GPL-2.0 */
/*
 * set.bpf.h - a set written through to the kernel copy before memcached
 * sees it: the part UDP's kv_udp_set (xdp.bpf.h) and TCP's kv_tcp_set
 * (tcp_verdict.bpf.h) share (part of kv.bpf.c). Each parses its own line
 * and copies the value from its own packet between kv_set_begin and
 * kv_set_end. Whatever fails, the key is invalidated: once memcached holds
 * the new value, no GET answered here may return the old one.
 */

/* Notes a set of key h (memcached's flags, exptime and value length) and
 * allocates the value's blocks in s->req.ref. 1: the caller copies the
 * value in, then calls kv_set_end; 0: h was invalidated instead (a value
 * over the pool's limit, two writes too close to order, an absolute expiry,
 * a full pool), and counted. */
static __always_inline int kv_set_begin(struct kv_scratch *s, __u64 h, __u64 flags, __u64 exptime, __u64 bytes,
					__u64 now)
{
	int conflict = note_write(h, now);

	if (bytes > pool_max_len()) {
		stat(KV_OVERSIZE);
		goto invalidate;
	}
	if (conflict) {
		stat(KV_WRITE_CONFLICTS);
		goto invalidate;
	}
	if (exptime > 30 * 24 * 3600) /* an absolute time: leave it to memcached */
		goto invalidate;
	s->req.expire_ns = exptime ? now + exptime * 1000000000ULL : 0;
	__builtin_memset(s->req.cas, 0, sizeof(s->req.cas));
	kv_make_suffix(s, flags, bytes);
	if (kv_alloc_value(s, bytes)) {
		stat(KV_POOL_FULL);
		goto invalidate;
	}
	return 1;
invalidate:
	kv_invalidate(s, h);
	return 0;
}

/* Publishes the value copied into s->req.ref as h's (copied: the copy
 * succeeded), or frees it and invalidates h. */
static __always_inline void kv_set_end(struct kv_scratch *s, __u64 h, int copied)
{
	if (copied) {
		s->req.seq = next_seq();
		if (kv_publish(s, h, 0, 0) == 0) {
			stat(KV_SETS);
			return;
		}
		stat(KV_POOL_FULL);
	}
	pool_free(&s->req.ref);
	kv_invalidate(s, h);
}
