/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp_stage.bpf.h - a segment of GETs answered from the pool into the
 * connection's stage (kv_conn.st), which kv_tcp_msg (tcp_msg.bpf.h) swaps
 * in for the marked segment on its way out (part of kv.bpf.c; the argument
 * is in tcp.bpf.h).
 */

/* Stage copy: n (<= KV_STAGE_PAD) bytes from kernel memory src to
 * st->buf at o. The mask keeps the verifier's bound; callers keep
 * o + n <= KV_STAGE_BUF. */
static __always_inline int stage_put(struct kv_stage *st, __u32 o, const void *src, __u32 n)
{
	if (!LEN_IN(n, KV_STAGE_PAD))
		return -1;
	return bpf_probe_read_kernel(st->buf + (o & (KV_STAGE_BUF - 1)), n, src);
}

/* s->casbuf = v in decimal; its length. */
static __always_inline __u32 put_cas(struct kv_scratch *s, __u64 v)
{
	__u8 tmp[32];
	__u32 n = 0;

	for (int i = 0; i < 20; i++) {
		tmp[i] = '0' + v % 10;
		v /= 10;
		n++;
		if (!v)
			break;
	}
	for (int i = 0; i < 20; i++) {
		if (i >= n)
			break;
		s->casbuf[i] = tmp[(n - 1 - i) & 31];
	}
	return n;
}

/* Copies block i of the snapshot s->snap (a value of vlen bytes) to the
 * stage at p + i * block size. 1: copied whole; 0: gone or recycled. */
__global int kv_stage_block(struct kv_scratch *s, struct kv_stage *st, __u32 i, __u32 p, __u32 vlen)
{
	__u32 bs = pool_block_size, off, n;
	__u64 idx;
	__u8 *b;

	if (!s || !st || i >= CISTERN_POOL_MAX_BLOCKS)
		return 0;
	off = i * bs;
	if (off >= vlen)
		return 0;
	idx = s->snap.ref.idx[i & (CISTERN_POOL_MAX_BLOCKS - 1)];
	n = vlen - off < bs ? vlen - off : bs;
	b = pool_block_get(idx);
	if (!b)
		return 0;
	/* in pieces of at most KV_STAGE_PAD bytes */
	for (__u32 q = 0; q < 4096 / KV_STAGE_PAD; q++) {
		__u32 qo = q * KV_STAGE_PAD, m;

		if (qo >= n)
			break;
		m = n - qo < KV_STAGE_PAD ? n - qo : KV_STAGE_PAD;
		if (stage_put(st, p + off + qo, b + POOL_BLOCK_HDR + (qo & 4095), m))
			return 0;
	}
	return pool_block_intact(b, idx);
}

/* Appends the reply to a GET of key s->req (hash h) to st at *o:
 * "VALUE <key> <flags> <bytes>\r\n<data>\r\n". 1: appended; 0: not cached;
 * -1: too large for the stage. */
__global int kv_stage_hit(struct kv_scratch *s, struct kv_stage *st, __u64 h, __u32 o, int gets)
{
	if (!s || !st)
		return 0;
	for (int attempt = 0; attempt < POOL_READ_RETRIES; attempt++) {
		__u32 klen, slen, vlen, p;
		int snap = kv_snapshot(s, h, 0), good = 1;

		if (snap < 0) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		if (!snap)
			return 0;
		REPLY_LENS(s, klen, slen, vlen);
		if (!LEN_IN(klen, KV_KEY_MAX) || !LEN_IN(slen, KV_SUFFIX_BUF - 1) || vlen > pool_max_len())
			return 0;
		if (gets) {
			/* " <flags> <bytes>\r\n" becomes " <flags> <bytes> <cas>\r\n" */
			__u64 cas = 0;

			for (int i = 5; i >= 0; i--)
				cas = cas << 8 | s->snap.cas[i];
			if (!cas || slen < 3)
				return 0; /* CAS unknown: memcached answers */
			s->cas_len = put_cas(s, cas);
		}
		/* room for this reply and the final "END\r\n" */
		if ((__u64)o + 6 + klen + slen + vlen + 2 + 5 + 22 > KV_STAGE_BUF)
			return -1;
		if (stage_put(st, o, "VALUE ", 6) || stage_put(st, o + 6, s->req.key, klen))
			return 0;
		if (gets) {
			__u32 cl = s->cas_len;

			if (stage_put(st, o + 6 + klen, s->snap.suffix, slen - 2) || stage_put(st, o + 6 + klen + slen - 2, " ", 1) ||
			    !LEN_IN(cl, 20) || stage_put(st, o + 6 + klen + slen - 1, s->casbuf, cl) ||
			    stage_put(st, o + 6 + klen + slen - 1 + cl, "\r\n", 2))
				return 0;
			slen += 1 + cl;
		} else if (stage_put(st, o + 6 + klen, s->snap.suffix, slen)) {
			return 0;
		}
		s->stage_slen = slen;
		p = o + 6 + klen + slen;
		for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
			if (i >= s->snap.ref.nblocks)
				break;
			if (!kv_stage_block(s, st, i, p, vlen)) {
				good = 0;
				break;
			}
		}
		if (!good) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		if (stage_put(st, p + vlen, "\r\n", 2))
			return 0;
		policy_event(h, EVICT_EV_ACCESS, 0);
		return 1;
	}
	stat(KV_READ_FAILURES);
	return 0;
}

/* Tries to answer the whole segment (len bytes, one or more GET lines)
 * from the pool into the connection's stage slot. The stage's length, or
 * 0 when the segment goes to memcached. */
__global int kv_tcp_serve(struct __sk_buff *skb, struct kv_conn *c, __u32 len, __u32 slot)
{
	struct kv_scratch *s;
	struct kv_stage *st;
	__u32 pos = 0, o = 0;
	int lines = 0;

	if (!skb || !c)
		return 0;
	s = &c->s;
	st = &c->st[slot & (KV_SQ - 1)];
	for (int l = 0; l < KV_STAGE_MAX_LINES; l++) {
		__u32 n = len - pos;
		int j;

		if (pos >= len)
			break;
		CLAMP(n, BUF - 1);
		if (n == 0 || bpf_skb_load_bytes(skb, pos, s->pkt, LEN1(n)))
			return 0;
		if (kv_req_line(s, n) || (s->ln.cmd != CMD_GET && s->ln.cmd != CMD_GETS))
			return 0;
		j = s->ln.ks;
		for (int key = 0; key < 16; key++) {
			int ke = kv_scan_token(s, n, j), r;

			if (ke <= j || ke - j > KV_KEY_MAX)
				return 0;
			r = kv_stage_hit(s, st, kv_take_key(s, j, ke - j), o, s->ln.cmd == CMD_GETS);
			if (r < 0)
				stat(KV_TCP_PASS_LARGE);
			if (r <= 0)
				return 0;
			o += 6 + s->req.keylen + s->stage_slen + s->snap.ref.len + 2;
			j = kv_skip_sp(s, n, ke);
			if (j >= s->ln.eol)
				break;
		}
		if (j < s->ln.eol)
			return 0; /* more than 16 keys */
		if (stage_put(st, o, "END\r\n", 5))
			return 0;
		o += 5;
		pos += s->ln.le;
		lines++;
	}
	if (pos != len || o < len)
		return 0;
	st->len = o;
	st->reqlen = len;
	for (int l = 0; l < KV_STAGE_MAX_LINES; l++)
		if (l < lines)
			stat(KV_TCP_HITS);
	return o;
}
