/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp_verdict.bpf.h - kv_tcp_verdict and the set path: a segment of GETs
 * all cached is answered (tcp_stage.bpf.h); any other is counted, its sets
 * written through and its other writes invalidated, then passed to
 * memcached (part of kv.bpf.c; the argument is in tcp.bpf.h).
 */

/* Copies block i of a set's value (s->req.ref, bytes long) from the
 * segment at dataoff. 0, or -1. */
__global int kv_skb_block(struct __sk_buff *skb, struct kv_scratch *s, __u32 i, __u32 dataoff, __u32 bytes)
{
	__u32 bs = pool_block_size, off, c;
	__u8 *b;

	if (!skb || !s || i >= CISTERN_POOL_MAX_BLOCKS)
		return -1;
	off = i * bs;
	if (off >= bytes)
		return -1;
	c = bytes - off < bs ? bytes - off : bs;
	b = pool_block_get(s->req.ref.idx[i & (CISTERN_POOL_MAX_BLOCKS - 1)]);
	if (!b || !LEN_IN(c, bs) || bpf_skb_load_bytes(skb, dataoff + off, b + POOL_BLOCK_HDR, c))
		return -1;
	return 0;
}

/* "set <key> <flags> <exptime> <bytes> [noreply]" (the line in s->pkt, n
 * bytes) whose data is in the segment at dataoff: written through to the
 * kernel copy before memcached sees it (set.bpf.h, as UDP's). Only
 * set: add, replace, append, prepend and cas may not store, so they
 * invalidate. 0: written or invalidated; -1: not a set the kernel can
 * read (the caller flushes). */
__global int kv_tcp_set(struct __sk_buff *skb, struct kv_scratch *s, __u32 n, __u32 dataoff)
{
	__u64 flags, exptime, bytes, h, now = bpf_ktime_get_ns();
	int ke, fe, ee, be, copied = 1;
	__u8 crlf[2];

	if (!skb || !s)
		return -1;
	ke = kv_scan_token(s, n, s->keystart);
	if (ke <= (int)s->keystart || ke - s->keystart > KV_KEY_MAX || !at(s, n, ke, ' '))
		return -1;
	h = kv_take_key(s, s->keystart, ke - s->keystart);
	fe = kv_parse_num(s, n, kv_skip_sp(s, n, ke));
	flags = s->num;
	ee = kv_parse_num(s, n, kv_skip_sp(s, n, fe < 0 ? 0 : fe));
	exptime = s->num;
	be = kv_parse_num(s, n, kv_skip_sp(s, n, ee < 0 ? 0 : ee));
	bytes = s->num;
	if (fe < 0 || ee < 0 || be < 0 || flags > 0xffffffffULL || bytes != s->ln.bytes ||
	    bpf_skb_load_bytes(skb, dataoff + bytes, crlf, 2) || crlf[0] != '\r' || crlf[1] != '\n')
		goto invalidate;
	if (!kv_set_begin(s, h, flags, exptime, bytes, now))
		return 0;
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= s->req.ref.nblocks)
			break;
		if (kv_skb_block(skb, s, i, dataoff, bytes)) {
			copied = 0;
			break;
		}
	}
	kv_set_end(s, h, copied);
	return 0;
invalidate:
	note_write(h, now);
	kv_invalidate(s, h);
	return 0;
}

/* Whether entry e could answer a GET (gets: with its CAS) as kv_snapshot
 * and kv_stage_hit judge it: live, published after the last flush, not
 * expired. Read without the entry's lock: a wrong guess only costs a
 * ticket (a fill that replaces a value with itself) or one (a later GET
 * passed again, until a write or a miss refills it). */
static __always_inline int tcp_servable(struct kv_entry *e, int gets, __u64 now)
{
	__u64 *fs = clock_slot(KV_CLOCK_FLUSH_SEQ), exp;

	if (!e || !fs || e->dead || !stamp_read(&e->body.ref.ver) || e->body.seq <= *fs)
		return 0;
	exp = e->body.expire_ns;
	if (exp && now >= exp)
		return 0;
	if (gets) {
		__u8 any = 0;

		for (int i = 0; i < 6; i++)
			any |= e->body.cas[i];
		return any != 0;
	}
	return 1;
}

/* Counts what one request line (in s->ln) asks of memcached, and
 * invalidates what it writes. */
static __always_inline void tcp_account(struct kv_conn *c, struct kv_scratch *s, __u32 n, __u64 now, int written)
{
	int cmd = s->ln.cmd;

	if (s->ln.why || cmd == CMD_STATS || cmd == CMD_QUIT || (s->ln.flags & LN_QUIET)) {
		/* memcached's answer (an error, many lines, none) is not one the
		 * count can follow; a write it could not read may still be one */
		if (cmd != CMD_GET && cmd != CMD_GETS && cmd != CMD_MGET && cmd != CMD_STATS)
			flush_all(now);
		stat(s->ln.why ? s->ln.why : KV_UNSUPPORTED);
		conn_blind(c);
		return;
	}
	if (!written && (cmd == CMD_SET || cmd == CMD_STORE || cmd == CMD_DELETE || cmd == CMD_MSET || cmd == CMD_MWRITE)) {
		if ((s->ln.flags & LN_B64) || kv_key_write(s, n, now))
			flush_all(now);
	}
	if (cmd == CMD_FLUSH || cmd == CMD_GAT)
		flush_all(now);
	if (cmd == CMD_GAT || cmd == CMD_MGET)
		stat(KV_PASS_CAS);
	if (cmd == CMD_GET || cmd == CMD_GETS) {
		/* a ticket for every key not cached, so that memcached's reply
		 * fills; a cached one gets none: its fill would only replace the
		 * value with itself (a pool allocation and a copy per key) */
		int j = s->ln.ks;

		for (int key = 0; key < 24; key++) {
			int ke = kv_scan_token(s, n, j);
			struct kv_entry *e;
			__u64 h;

			if (ke <= j || ke - j > KV_KEY_MAX)
				break;
			h = kv_take_key(s, j, ke - j);
			e = bpf_map_lookup_elem(&kv_entries, &h);
			if (tcp_servable(e, cmd == CMD_GETS, now)) {
				if (!c->replied)
					stat(KV_TCP_PASS_FIRST);
				else
					stat(c->pending ? KV_TCP_PASS_ORDER : KV_TCP_PASS_MIXED);
			} else {
				ticket(h, now);
				stat(KV_TCP_MISSES);
			}
			j = kv_skip_sp(s, n, ke);
			if (j >= s->ln.eol)
				break;
		}
	}
	c->pending += s->ln.replies;
	c->skip = s->ln.data;
}

/* One step over a segment handed to memcached: the rest of a write's data,
 * the rest of a split line, or one line. The next position, or -1 when
 * the connection went blind. */
__global int kv_tcp_step(struct __sk_buff *skb, struct kv_conn *c, __u32 pos, __u32 len)
{
	struct kv_scratch *s;
	__u64 now = bpf_ktime_get_ns();
	__u32 n, part;

	if (!skb || !c || pos >= len)
		return -1;
	s = &c->s;
	if (c->skip) {
		__u32 d = c->skip < len - pos ? c->skip : len - pos;

		c->skip -= d;
		return pos + d;
	}
	part = c->part;
	if (part) {
		/* the line started in an earlier segment: kept part, then this one */
		__u32 n2 = len - pos;

		if (part >= KV_LINE) {
			conn_blind(c);
			return -1;
		}
		__builtin_memcpy(s->pkt, c->line, KV_LINE);
		CLAMP(n2, KV_LINE - 1);
		part &= KV_LINE - 1;
		if (!LEN_IN(n2, KV_LINE - 1) || bpf_skb_load_bytes(skb, pos, s->pkt + part, n2))
			return -1;
		n = part + n2;
		stat(KV_TCP_PASS_SPLIT);
		if (kv_line_end(s, n, 0) <= 0) {
			if (n2 == len - pos && n < KV_LINE) {
				__builtin_memcpy(c->line, s->pkt, KV_LINE);
				c->part = n;
				return len;
			}
			conn_blind(c);
			return -1;
		}
		kv_req_line(s, n);
		c->part = 0;
		tcp_account(c, s, n, now, 0);
		if (c->blind)
			return -1;
		return pos + s->ln.le - part;
	}
	n = len - pos;
	CLAMP(n, BUF - 1);
	if (n == 0 || bpf_skb_load_bytes(skb, pos, s->pkt, LEN1(n)))
		return -1;
	if (kv_line_end(s, n, 0) <= 0) {
		if (n == len - pos && n < KV_LINE) {
			/* the segment ends inside this line: keep it for the next */
			__builtin_memcpy(c->line, s->pkt, KV_LINE);
			c->part = n;
			return len;
		}
		stat(KV_PASS_LONG);
		conn_blind(c);
		return -1;
	}
	kv_req_line(s, n);
	{
		/* a set whose data this segment holds is written through */
		int written = !s->ln.why && s->ln.cmd == CMD_SET && s->ln.data &&
			      (__u64)pos + s->ln.le + s->ln.data <= len &&
			      kv_tcp_set(skb, s, n, pos + s->ln.le) == 0;

		tcp_account(c, s, n, now, written);
	}
	if (c->blind)
		return -1;
	return pos + s->ln.le;
}

SEC("sk_skb/verdict")
int kv_tcp_verdict(struct __sk_buff *skb)
{
	struct kv_conn_key k = {};
	struct kv_conn *c;
	__u32 len = skb->len, pos = 0;

	k.lip = skb->local_ip4;
	k.rip = skb->remote_ip4;
	k.lport = skb->local_port;
	k.rport = norm_port(skb->remote_port);
	c = bpf_map_lookup_elem(&kv_conns, &k);
	if (!c || c->blind || len == 0)
		return SK_PASS;
	/* First read: a connection joins kv_socks before memcached accepts
	 * it, and a segment that arrived before the accept runs this verdict
	 * only inside memcached's first read (tcp_bpf_recvmsg_parser's
	 * catch-up). A redirect there advances copied_seq while that read
	 * holds the old value, which it writes back: on kernels that fail
	 * sockmap_self_redirect the answered bytes stay counted as unread and
	 * memcached spins on EAGAIN. So nothing is answered until memcached
	 * has sent on the connection: it sends only after it read. */
	if (c->replied && c->pending == 0 && c->skip == 0 && c->part == 0 &&
	    c->stail - c->shead < KV_SQ && len < BUF) {
		__u32 marker = KV_MARKER;

		if (kv_tcp_serve(skb, c, len, c->stail) > 0 && bpf_skb_store_bytes(skb, 0, &marker, 4, 0) == 0) {
			c->stail++;
			return bpf_sk_redirect_hash(skb, &kv_socks, &k, 0);
		}
	}
	for (int i = 0; i < KV_TCP_LINES; i++) {
		int next = kv_tcp_step(skb, c, pos, len);

		if (next < 0 || next >= (int)len)
			return SK_PASS;
		pos = next;
	}
	stat(KV_PASS_LONG);
	conn_blind(c); /* more lines in one segment than counted */
	return SK_PASS;
}
