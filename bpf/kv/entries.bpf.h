/* SPDX-License-Identifier: GPL-2.0 */
/*
 * entries.bpf.h - write tracking, entries, snapshots, fills and
 * invalidation (part of kv.bpf.c).
 */
/* ---- write tracking ---- */

static __always_inline struct kv_write *wslot(__u64 h)
{
	__u32 k = h & WSLOT_MASK;

	return bpf_map_lookup_elem(&kv_writes, &k);
}

/* Records a write to key hash h; 1 when it came within kv_write_window_ns of
 * the previous write to it (their order at memcached is unknown). */
static __always_inline int note_write(__u64 h, __u64 now)
{
	__u64 *clk = clock_slot(KV_CLOCK_WRITES);
	struct kv_write *w = wslot(h);
	__u64 prev;

	if (!clk || !w)
		return 1;
	prev = w->ts;
	w->seq = __sync_fetch_and_add(clk, 1) + 1;
	w->ts = now;
	/* prev may be a hair ahead of now (another CPU's clock read): that is
	 * as close as writes get. */
	return prev && (prev >= now || now - prev < kv_write_window_ns);
}

static __always_inline void flush_all(__u64 now)
{
	__u64 *clk = clock_slot(KV_CLOCK_WRITES);
	__u64 *fs = clock_slot(KV_CLOCK_FLUSH_SEQ), *ft = clock_slot(KV_CLOCK_FLUSH_TS);

	if (!clk || !fs || !ft)
		return;
	*fs = __sync_fetch_and_add(clk, 1) + 1;
	*ft = now;
}

/* ---- entries ---- */

/* Kills and deletes the entry of h, then frees its blocks. 1 if it existed. */
__global int kv_invalidate(struct kv_scratch *s, __u64 h)
{
	struct kv_entry *e;
	int live;

	if (!s)
		return 0;
	e = bpf_map_lookup_elem(&kv_entries, &h);
	if (!e)
		return 0;
	bpf_spin_lock(&e->lock);
	live = !e->dead && e->hash == h;
	if (live) {
		__builtin_memcpy(&s->old, &e->body.ref, sizeof(s->old));
		stamp_set(&e->body.ref.ver, 0); /* before anything a reader checks */
		e->body.ref.nblocks = 0;
		e->dead = 1;
	}
	bpf_spin_unlock(&e->lock);
	if (!live)
		return 0;
	bpf_map_delete_elem(&kv_entries, &h);
	pool_free(&s->old);
	policy_event(h, EVICT_EV_REMOVE, 0);
	return 1;
}

/* Evicts the oldest live entry of the FIFO ring; 1 if one went. */
__global int kv_evict_one(struct kv_scratch *s)
{
	__u64 *head = clock_slot(KV_CLOCK_FIFO_HEAD), *tail = clock_slot(KV_CLOCK_FIFO_TAIL);

	if (!s || !head || !tail)
		return 0;
	if (kv_policy_on)
		stat(KV_POLICY_FALLBACKS);
	for (int i = 0; i < 8; i++) {
		struct kv_fifo_slot *f;
		struct kv_entry *e;
		__u64 t = *tail, fh;
		__u32 k;

		if (t >= *head)
			return 0;
		if (__sync_val_compare_and_swap(tail, t, t + 1) != t)
			continue; /* another CPU took this slot */
		k = t & kv_fifo_mask;
		f = bpf_map_lookup_elem(&kv_fifo, &k);
		if (!f)
			return 0;
		fh = f->hash;
		e = bpf_map_lookup_elem(&kv_entries, &fh);
		if (!e || e->birth != f->birth)
			continue; /* already gone or replaced */
		if (kv_invalidate(s, fh)) {
			stat(KV_EVICTIONS);
			return 1;
		}
	}
	return 0;
}

/* pool_alloc into s->req.ref, evicting FIFO victims while the pool is full. */
__global int kv_alloc_value(struct kv_scratch *s, __u32 len)
{
	int err = -POOL_EINVAL;

	if (!s)
		return err;
	for (int i = 0; i < 4; i++) {
		err = pool_alloc(&s->req.ref, len);
		if (err != -POOL_ENOSPC)
			return err;
		if (!kv_evict_one(s))
			break;
	}
	return err;
}

/* True when a write stamped ts is at least the fill quarantine before now. */
static __always_inline int settled(__u64 ts, __u64 now)
{
	return ts <= now && now - ts >= kv_fill_quarantine_ns;
}

/* Publishes s->req as the value of h. A fill (fill != 0) is published only
 * if no write or flush came after its ticket tseq nor within the quarantine.
 * 0: published; 1: refused; -1: no entry. */
__global int kv_publish(struct kv_scratch *s, __u64 h, int fill, __u64 tseq)
{
	__u64 *fs = clock_slot(KV_CLOCK_FLUSH_SEQ), *ft = clock_slot(KV_CLOCK_FLUSH_TS), now;
	__u64 *head = clock_slot(KV_CLOCK_FIFO_HEAD);
	struct kv_write *w = wslot(h);
	struct kv_entry *e;
	int ok, created = 0;

	if (!s || !w || !fs || !ft || !head)
		return -1;
	e = bpf_map_lookup_elem(&kv_entries, &h);
	if (!e) {
		/* The template through a map-value pointer to this CPU's
		 * scratch (the same memory as s): older verifiers (6.1) refuse
		 * a global function's memory argument as a map value. */
		struct kv_scratch *ms = scratch();

		if (!ms)
			return -1;
		__builtin_memset(ms->fresh, 0, sizeof(ms->fresh));
		((struct kv_entry *)ms->fresh)->hash = h;
		for (int i = 0; i < 2; i++) {
			if (bpf_map_update_elem(&kv_entries, &h, ms->fresh, BPF_NOEXIST) == 0) {
				__u64 t = __sync_fetch_and_add(head, 1);
				__u32 k = t & kv_fifo_mask;
				struct kv_fifo_slot *f = bpf_map_lookup_elem(&kv_fifo, &k);

				e = bpf_map_lookup_elem(&kv_entries, &h);
				if (e)
					e->birth = t + 1;
				/* The policy learns of the entry now, even if the
				 * publish below is refused and leaves it empty:
				 * else only the fallback could ever evict it. */
				policy_event(h, EVICT_EV_FILL, s->req.ref.nblocks ? s->req.ref.nblocks : 1);
				created = 1;
				if (f) {
					f->hash = h;
					f->birth = t + 1;
				}
				break;
			}
			if ((e = bpf_map_lookup_elem(&kv_entries, &h)))
				break; /* another CPU created it */
			stat(KV_OBJECTS_FULL);
			if (!kv_evict_one(s))
				return -1;
		}
		if (!e)
			return -1;
	}
	/* The clock is read here, just before the lock, and compared signed-safe
	 * (settled): a write stamped after an earlier reading would otherwise
	 * look far in the past through unsigned wrap. */
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&e->lock);
	ok = !e->dead && e->hash == h;
	if (ok && fill)
		ok = w->seq <= tseq && settled(w->ts, now) && *fs <= tseq && settled(*ft, now);
	if (ok) {
		__builtin_memcpy(&s->old, &e->body.ref, sizeof(s->old));
		/* Stamp 0, the body after the stamp, then the new stamp. */
		stamp_set(&e->body.ref.ver, 0);
		__builtin_memcpy((__u8 *)&e->body + sizeof(__u64), (__u8 *)&s->req + sizeof(__u64),
				 sizeof(e->body) - sizeof(__u64));
		stamp_set(&e->body.ref.ver, s->req.ref.ver);
	}
	bpf_spin_unlock(&e->lock);
	if (!ok)
		return 1;
	pool_free(&s->old);
	if (!created) /* a new value for a known entry: a use */
		policy_event(h, EVICT_EV_FILL, s->req.ref.nblocks ? s->req.ref.nblocks : 1);
	return 0;
}

static __always_inline __u64 next_seq(void)
{
	__u64 *clk = clock_slot(KV_CLOCK_WRITES);

	return clk ? __sync_fetch_and_add(clk, 1) + 1 : 0;
}

/* Invalidates the key of a write command memcached will execute. */
__global int kv_key_write(struct kv_scratch *s, __u32 n, __u64 now)
{
	int ke;
	__u64 h;

	if (!s)
		return -1;
	ke = kv_scan_token(s, n, s->keystart);
	if (ke <= (int)s->keystart || ke - s->keystart > KV_KEY_MAX)
		return -1;
	h = kv_take_key(s, s->keystart, ke - s->keystart);
	note_write(h, now);
	kv_invalidate(s, h);
	return 0;
}
