/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp_msg.bpf.h - kv_tcp_msg (sk_msg): kernel replies swapped in for their
 * marked segments, memcached's replies counted and filling the pool
 * (part of kv.bpf.c; the argument is in tcp.bpf.h).
 */

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
	c->replied = 1; /* memcached's own send: its first read is over */
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
