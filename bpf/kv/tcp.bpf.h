/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp.bpf.h - GETs on memcached's TCP connections answered in the kernel
 * (part of kv.bpf.c). docs/kerby-kv.md, "TCP", has the argument.
 *
 *   kv_sockops      (cgroup sockops) memcached's accepted connections, in
 *                   the server's network namespace, go into kv_socks at
 *                   PASSIVE_ESTABLISHED, before any byte arrives; their
 *                   state (kv_conns) goes at close.
 *   kv_tcp_verdict  (sk_skb verdict, no strparser) every segment the client
 *                   sends. A segment made only of GETs whose keys are all
 *                   cached, on a connection with no request waiting on
 *                   memcached, is answered: the reply is staged (kv_conn.st),
 *                   the segment's first bytes are overwritten with a marker
 *                   and it is redirected to the socket's own egress.
 *                   Everything else goes to memcached unchanged (SK_PASS),
 *                   after its requests were counted and its writes
 *                   invalidated.
 *   kv_tcp_msg      (sk_msg) every send on those sockets: a marked segment
 *                   (sent by the sockmap's worker) is replaced by its staged
 *                   reply; memcached's own replies are counted (the order
 *                   rule) and fill the pool when a GET of ours missed.
 *
 * The verdict cannot grow the segment it redirects: the bytes it consumed
 * are accounted by its length (copied_seq), so the reply is swapped in on
 * the way out, where bpf_msg_push_data may grow it.
 *
 * Order. A kernel reply may leave only when every reply memcached owes on
 * the connection has left: kv_conn.pending counts the requests handed to
 * memcached that want a reply (noreply ones do not) and kv_tcp_msg takes one
 * off for each reply line memcached sends (END, STORED, ...; VALUE lines
 * and their data are not ends). A redirected segment is queued on the
 * socket's psock (ingress_skb) and every later segment, passed or not, is
 * queued behind it, so memcached reads the next request only after the
 * kernel's reply went out. Verdict and sk_msg run under the socket's lock,
 * so kv_conn needs no other.
 *
 * A stream the programs cannot follow (a stats command, a meta command with
 * the q flag, a line longer than the buffer, a reply line split between two
 * sends, ...) makes the connection blind: no kernel hit on it again, every
 * byte to memcached as sent (tcp_blind).
 */

/* A port as the context holds it, in network order; the remote port of
 * sockops, sk_skb and sk_msg contexts sits in the upper half. */
static __always_inline __u32 norm_port(__u32 p)
{
	return p > 0xffff ? p >> 16 : p;
}

SEC("sockops")
int kv_sockops(struct bpf_sock_ops *skops)
{
	struct kv_conn_key k = {};
	__u32 lport = skops->local_port;
	__u64 *netns;

	barrier_var(lport);
	if (skops->family != 2 /* AF_INET */ || lport != kv_port)
		return 1;
	/* memcached of this serve only: the cookie of its network namespace,
	 * written by the loader at attach (0: none yet, take nothing) */
	netns = clock_slot(KV_CLOCK_NETNS);
	if (!netns || !*netns || bpf_get_netns_cookie(skops) != *netns)
		return 1;
	k.lip = skops->local_ip4;
	k.rip = skops->remote_ip4;
	k.lport = lport;
	k.rport = norm_port(skops->remote_port);
	switch (skops->op) {
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: {
		__u32 z = 0;
		struct kv_conn *zero = bpf_map_lookup_elem(&kv_conn_zero, &z);

		if (!zero)
			return 1;
		bpf_map_delete_elem(&kv_conns, &k);
		if (bpf_map_update_elem(&kv_conns, &k, zero, BPF_NOEXIST) == 0 &&
		    bpf_sock_hash_update(skops, &kv_socks, &k, BPF_NOEXIST) == 0) {
			stat(KV_TCP_CONNS);
			bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_STATE_CB_FLAG);
		}
		return 1;
	}
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == BPF_TCP_CLOSE || skops->args[1] == BPF_TCP_CLOSE_WAIT ||
		    skops->args[1] == BPF_TCP_FIN_WAIT1)
			bpf_map_delete_elem(&kv_conns, &k);
		return 1;
	}
	return 1;
}

static __always_inline void conn_blind(struct kv_conn *c)
{
	if (!c->blind)
		stat(KV_TCP_BLIND);
	c->blind = 1;
}

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

/* Counts what one request line (in s->ln) asks of memcached, and
 * invalidates what it writes. */
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
 * kernel copy before memcached sees it, as a UDP set (kv_udp_set). Only
 * set: add, replace, append, prepend and cas may not store, so they
 * invalidate. 0: written or invalidated; -1: not a set the kernel can
 * read (the caller flushes). */
__global int kv_tcp_set(struct __sk_buff *skb, struct kv_scratch *s, __u32 n, __u32 dataoff)
{
	__u64 flags, exptime, bytes, h, now = bpf_ktime_get_ns();
	int ke, fe, ee, be;
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
	if (note_write(h, now)) {
		stat(KV_WRITE_CONFLICTS);
		kv_invalidate(s, h);
		return 0;
	}
	if (bytes > pool_max_len()) {
		stat(KV_OVERSIZE);
		kv_invalidate(s, h);
		return 0;
	}
	if (exptime > 30 * 24 * 3600) { /* an absolute time: leave it to memcached */
		kv_invalidate(s, h);
		return 0;
	}
	s->req.expire_ns = exptime ? now + exptime * 1000000000ULL : 0;
	__builtin_memset(s->req.cas, 0, sizeof(s->req.cas));
	kv_make_suffix(s, flags, bytes);
	if (kv_alloc_value(s, bytes)) {
		stat(KV_POOL_FULL);
		kv_invalidate(s, h);
		return 0;
	}
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= s->req.ref.nblocks)
			break;
		if (kv_skb_block(skb, s, i, dataoff, bytes)) {
			pool_free(&s->req.ref);
			kv_invalidate(s, h);
			return 0;
		}
	}
	s->req.seq = next_seq();
	if (kv_publish(s, h, 0, 0)) {
		pool_free(&s->req.ref);
		kv_invalidate(s, h);
		stat(KV_POOL_FULL);
		return 0;
	}
	stat(KV_SETS);
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
	if (c->pending == 0 && c->skip == 0 && c->part == 0 && c->stail - c->shead < KV_SQ &&
	    len < BUF) {
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

/* ---- sk_msg: kernel replies swapped in, memcached's replies counted ---- */

/* Writes stage bytes [from, from + m) over the message's bytes
 * [at, at + m), m <= 256: 8-byte words, the last one overlapping its
 * predecessor (same source bytes), or single bytes below 8. */
__global int kv_msg_window(struct sk_msg_md *msg, struct kv_conn *c, __u32 at, __u32 from, __u32 m)
{
	struct kv_stage *st;
	void *data, *end;

	if (!msg || !c || m == 0 || m > 256)
		return -1;
	st = &c->st[c->out_slot & (KV_SQ - 1)];
	if (bpf_msg_pull_data(msg, at, at + m, 0))
		return -1;
	data = msg->data;
	end = msg->data_end;
	{
		/* whole words at constant offsets, then the bytes after them:
		 * shapes the 6.1 verifier follows without splitting states */
		__u32 nw = (m / 8) & 63, tail = nw * 8;

		for (__u32 i = 0; i < 256 / 8; i++) {
			__u8 *p = data + i * 8;

			if (i >= nw)
				break;
			if ((void *)(p + 8) > end)
				return -1;
			*(__u64 *)p = *(__u64 *)&st->buf[(from + i * 8) & (KV_STAGE_BUF - 1)];
		}
		for (__u32 j = 0; j < 8; j++) {
			__u8 *p;

			if (tail + j >= m)
				break;
			p = data + tail + j;
			if ((void *)(p + 1) > end)
				return -1;
			*p = st->buf[(from + tail + j) & (KV_STAGE_BUF - 1)];
		}
	}
	return 0;
}

/* Writes bytes [from, from + n) of stage c->out_slot over the message's
 * bytes [at, at + n). */
__global int kv_msg_write(struct sk_msg_md *msg, struct kv_conn *c, __u32 at, __u32 from, __u32 n)
{
	if (!msg || !c)
		return -1;
	for (__u32 w = 0; w < KV_STAGE_BUF / 256; w++) {
		__u32 wo = w * 256;

		if (wo >= n)
			break;
		if (kv_msg_window(msg, c, at + wo, from + wo, n - wo < 256 ? n - wo : 256))
			return -1;
	}
	return 0;
}

/* The first send of a marked segment: its stage's reply, minus what the
 * segment's later pieces (if it is sent in several) will carry. */
static __always_inline int msg_hit(struct sk_msg_md *msg, struct kv_conn *c, __u32 size)
{
	__u32 len, reqlen, now;
	struct kv_stage *st;

	if (c->shead == c->stail)
		return -1;
	c->out_slot = c->shead & (KV_SQ - 1);
	st = &c->st[c->out_slot];
	c->shead++;
	len = st->len;
	reqlen = st->reqlen;
	if (size > reqlen || len < reqlen || len > KV_STAGE_BUF)
		return -1;
	now = len - (reqlen - size);
	if (now > size && bpf_msg_push_data(msg, size, now - size, 0))
		return -1;
	/* The segment's bytes and the pushed ones are separate elements of
	 * the message: written apart, no window spans both, so that
	 * bpf_msg_pull_data never merges them (a page allocated and the
	 * whole reply copied once more). */
	if (kv_msg_write(msg, c, 0, 0, size))
		return -1;
	if (now > size && kv_msg_write(msg, c, size, size, now - size))
		return -1;
	c->out_off = now;
	c->out_left = reqlen - size;
	return 0;
}

/* Copies block i of a fill (s->req.ref) from the message's value bytes
 * at dataoff (bytes long). 0, or -1. */
__global int kv_msg_block(struct sk_msg_md *msg, struct kv_scratch *s, __u32 i, __u32 dataoff, __u32 bytes)
{
	__u32 bs = pool_block_size, off, c;
	void *data;
	__u8 *b;

	if (!msg || !s || i >= CISTERN_POOL_MAX_BLOCKS)
		return -1;
	off = i * bs;
	if (off >= bytes)
		return -1;
	c = bytes - off < bs ? bytes - off : bs;
	b = pool_block_get(s->req.ref.idx[i & (CISTERN_POOL_MAX_BLOCKS - 1)]);
	if (!b || !LEN_IN(c, bs) || bpf_msg_pull_data(msg, dataoff + off, dataoff + off + c, 0))
		return -1;
	data = msg->data;
	if (data + 1 > msg->data_end || bpf_probe_read_kernel(b + POOL_BLOCK_HDR, c, data))
		return -1;
	return 0;
}

/* Stores memcached's TCP reply to a GET, "VALUE <key> <flags> <bytes>"
 * (key at s->pkt[6, ke)) with its data at dataoff of the message, if a GET
 * of ours missed on that key and no write raced it (as kv_fill). */
__global int kv_tcp_fill(struct sk_msg_md *msg, struct kv_scratch *s, __u32 ke, __u32 dataoff)
{
	__u64 h, now = bpf_ktime_get_ns(), tseq, flags, bytes;
	__u32 k;
	struct kv_ticket *t;
	struct kv_write *w;

	if (!msg || !s)
		return 0;
	flags = s->ln.vflags;
	bytes = s->ln.bytes;
	if (ke <= 6 || ke - 6 > KV_KEY_MAX)
		return 0;
	if (bytes > pool_max_len()) {
		stat(KV_OVERSIZE); /* its GETs go on to memcached */
		return 0;
	}
	h = kv_take_key(s, 6, ke - 6);
	k = h & WSLOT_MASK;
	t = bpf_map_lookup_elem(&kv_tickets, &k);
	if (!t || !t->ts || now - t->ts > kv_ticket_ttl_ns)
		return 0;
	tseq = t->seq;
	w = wslot(h);
	if (!w || w->seq > tseq || !settled(w->ts, now)) {
		stat(KV_FILL_REJECTED);
		return 0;
	}
	kv_make_suffix(s, flags, bytes);
	s->req.expire_ns = kv_fill_ttl_ns ? now + kv_fill_ttl_ns : 0;
	{
		/* a CAS over 48 bits is not kept: gets then go to memcached */
		__u64 cas = s->ln.vcas >> 48 ? 0 : s->ln.vcas;

		for (int i = 0; i < 6; i++)
			s->req.cas[i] = cas >> (8 * i);
	}
	if (kv_alloc_value(s, bytes)) {
		stat(KV_POOL_FULL);
		return 0;
	}
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		if (i >= s->req.ref.nblocks)
			break;
		if (kv_msg_block(msg, s, i, dataoff, bytes))
			goto fail;
	}
	s->req.seq = next_seq();
	if (kv_publish(s, h, 1, tseq)) {
		pool_free(&s->req.ref);
		stat(KV_FILL_REJECTED);
		return 0;
	}
	stat(KV_FILLS);
	stat(KV_TCP_FILLS);
	return 1;
fail:
	pool_free(&s->req.ref);
	return 0;
}

/* Handles one reply line of memcached at off of the message: counts it,
 * fills on a VALUE of a GET that missed. The next offset, or -1. */
__global int kv_msg_reply(struct sk_msg_md *msg, struct kv_conn *c, __u32 off, __u32 size)
{
	struct kv_scratch *s;
	__u32 n = size - off, dataoff, end;
	void *data;
	int le, ke, fe, be;
	__u64 bytes, flags;

	if (!msg || !c || off >= size)
		return -1;
	s = &c->s;
	if (c->rskip) {
		__u32 d = c->rskip < size - off ? c->rskip : size - off;

		c->rskip -= d;
		return off + d;
	}
	CLAMP(n, BUF - 1);
	if (bpf_msg_pull_data(msg, off, off + n, 0))
		return -1;
	data = msg->data;
	if (data + 1 > msg->data_end || !LEN_IN(n, BUF - 1) || bpf_probe_read_kernel(s->pkt, n, data))
		return -1;
	le = kv_line_end(s, n, 0);
	if (le <= 0)
		return -1; /* a reply line split between sends */
	if (word(s, n, 0, "VALUE ", 6)) {
		/* VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n: not an end */
		ke = kv_scan_token(s, n, 6);
		if (ke <= 6 || ke - 6 > KV_KEY_MAX)
			return -1;
		fe = kv_parse_num(s, n, ke + 1);
		if (fe < 0)
			return -1;
		flags = s->num;
		be = kv_parse_num(s, n, fe + 1);
		if (be < 0)
			return -1;
		bytes = s->num;
		s->ln.vcas = 0;
		if (at(s, n, be, ' ') && kv_parse_num20(s, n, be + 1) > 0)
			s->ln.vcas = s->num;
		dataoff = off + le;
		end = dataoff + bytes + 2;
		if (end <= size) {
			s->ln.vflags = flags;
			s->ln.bytes = bytes;
			kv_tcp_fill(msg, s, ke, dataoff);
		}
		if (end > size) {
			c->rskip = end - size;
			return size;
		}
		return end;
	}
	if (word(s, n, 0, "VA ", 3)) {
		/* meta: VA <bytes> <flags>*\r\n<data>\r\n ends a request */
		be = kv_parse_num(s, n, 3);
		if (be < 0)
			return -1;
		end = off + le + s->num + 2;
		if (end > size) {
			c->rskip = end - size;
			end = size;
		}
	} else if (word(s, n, 0, "STAT ", 5) || word(s, n, 0, "ITEM ", 5)) {
		return off + le; /* stats lines: the connection is blind already */
	} else {
		end = off + le;
	}
	stat(KV_TCP_REPLIES);
	if (c->pending <= 0)
		return -2; /* a reply the count did not expect */
	c->pending--;
	return end;
}

SEC("sk_msg")
int kv_tcp_msg(struct sk_msg_md *msg)
{
	struct kv_conn_key k = {};
	struct kv_conn *c;
	__u32 size = msg->size, off = 0;
	void *data, *end;

	k.lip = msg->local_ip4;
	k.rip = msg->remote_ip4;
	k.lport = msg->local_port;
	k.rport = norm_port(msg->remote_port);
	c = bpf_map_lookup_elem(&kv_conns, &k);
	if (!c || size == 0)
		return SK_PASS;
	if (c->out_left) {
		/* a later piece of a marked segment: the rest of its reply */
		__u32 n = size < c->out_left ? size : c->out_left;

		if (kv_msg_write(msg, c, 0, c->out_off, n)) {
			stat(KV_TCP_STAGE_LOST);
			conn_blind(c);
		}
		c->out_off += n;
		c->out_left -= n;
		return SK_PASS;
	}
	if (bpf_msg_pull_data(msg, 0, size < 4 ? size : 4, 0) == 0) {
		data = msg->data;
		end = msg->data_end;
		if (data + 4 <= end && *(__u32 *)data == KV_MARKER) {
			if (msg_hit(msg, c, size)) {
				/* the reply could not be swapped in (no memory
				 * to grow the message): the client gets the
				 * request's bytes, and no further kernel hits */
				stat(KV_TCP_STAGE_LOST);
				conn_blind(c);
			}
			return SK_PASS;
		}
	}
	if (c->blind)
		return SK_PASS;
	for (int i = 0; i < KV_TCP_LINES; i++) {
		int next = kv_msg_reply(msg, c, off, size);

		if (next < 0) {
			conn_blind(c);
			return SK_PASS;
		}
		if (next >= (int)size)
			return SK_PASS;
		off = next;
	}
	conn_blind(c);
	return SK_PASS;
}
