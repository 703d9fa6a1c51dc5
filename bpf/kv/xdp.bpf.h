/* SPDX-License-Identifier: GPL-2.0 */
/*
 * xdp.bpf.h - kv_xdp: UDP GET hits answered in the packet, misses ticketed,
 * writes applied or invalidated before memcached sees them (part of kv.bpf.c).
 */
/* ---- XDP ---- */

static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

/* Swaps addresses and ports and fixes lengths and the IP checksum, so the
 * packet goes back to the client as memcached's reply. */
static __always_inline void turn_around(struct ethhdr *eth, struct iphdr *ip, struct udphdr *udp, __u32 plen)
{
	__u8 mac[6];
	__u32 addr;
	__u16 port, *w = (__u16 *)ip;
	__u64 sum = 0;

	__builtin_memcpy(mac, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, mac, 6);
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	ip->tot_len = bpf_htons(plen - sizeof(*eth));
	ip->ttl = 64;
	ip->check = 0;
	for (int i = 0; i < 10; i++)
		sum += w[i];
	ip->check = csum_fold(sum);
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	udp->len = bpf_htons(plen - sizeof(*eth) - sizeof(*ip));
	udp->check = 0; /* optional for UDP over IPv4 */
}

/* Hands a GET hit whose reply does not fit the XDP frame to kv_ingress, via
 * XDP metadata; without metadata support it simply goes to memcached. */
static __always_inline int to_tc(struct xdp_md *ctx)
{
	void *data, *meta;

	stat(KV_GROW_FAILED);
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32)))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	meta = (void *)(long)ctx->data_meta;
	if (meta + sizeof(__u32) > data)
		return XDP_PASS;
	*(__u32 *)meta = KV_META_SERVE;
	return XDP_PASS;
}

/* Writes "get <key>\r\n" back at the original length, so memcached can answer
 * a GET the kernel gave up on after it had started the reply. */
static __always_inline int restore_get(struct xdp_md *ctx, struct kv_scratch *s, __u32 off, __u32 cur, __u32 orig)
{
	__u32 klen = s->req.keylen;

	if (!LEN_IN(klen, KV_KEY_MAX) || bpf_xdp_adjust_tail(ctx, (int)orig - (int)cur))
		return XDP_DROP; /* cannot happen: shrinking back to the original */
	bpf_xdp_store_bytes(ctx, off, "get ", 4);
	bpf_xdp_store_bytes(ctx, off + 4, s->req.key, klen);
	bpf_xdp_store_bytes(ctx, off + 4 + klen, "\r\n", 2);
	return XDP_PASS;
}

_Static_assert(__builtin_offsetof(struct kv_body, ref.ver) == 0,
	       "kv_publish writes the body after its stamp, ref.ver, comes first");

/* Snapshot of the entry of key s->req (hash h) into s->snap: 1 when it holds
 * a live value for exactly that key, 0 when not, -1 when a writer changed the
 * entry during the copy (try again). Lock-free: see stamp_set. */
__global int kv_snapshot(struct kv_scratch *s, __u64 h, __u64 now)
{
	__u64 *fs = clock_slot(KV_CLOCK_FLUSH_SEQ), v;
	struct kv_entry *e;
	__u32 klen;
	int live;

	if (!s || !fs)
		return 0;
	e = bpf_map_lookup_elem(&kv_entries, &h);
	if (!e)
		return 0;
	klen = s->req.keylen;
	v = stamp_read(&e->body.ref.ver);
	if (!v)
		return 0; /* no value, dead, or a write under way: a miss is safe */
	/* Compare the key in place (zero-padded, so whole words up to its
	 * length decide) and copy out only what a reply needs (~130 bytes). */
	live = !e->dead && e->hash == h && e->body.keylen == klen;
	for (__u32 i = 0; live && i < KV_KEY_BUF / 8; i++) {
		if (i * 8 >= klen)
			break;
		if (((__u64 *)e->body.key)[i] != ((__u64 *)s->req.key)[i])
			live = 0;
	}
	if (live) {
		__builtin_memcpy(&s->snap.ref, &e->body.ref, sizeof(s->snap.ref));
		s->snap.seq = e->body.seq;
		s->snap.expire_ns = e->body.expire_ns;
		s->snap.suffix_len = e->body.suffix_len;
		__builtin_memcpy(s->snap.cas, e->body.cas, sizeof(s->snap.cas));
		__builtin_memcpy(s->snap.suffix, e->body.suffix, sizeof(s->snap.suffix));
	}
	if (stamp_read(&e->body.ref.ver) != v)
		return -1;
	if (!live)
		return 0;
	if (s->snap.seq <= *fs)
		return 0;
	if (s->snap.expire_ns && (now ? now : bpf_ktime_get_ns()) >= s->snap.expire_ns) {
		stat(KV_EXPIRED);
		kv_invalidate(s, h);
		return 0;
	}
	if (s->req.keylen == 0 || s->req.keylen > KV_KEY_MAX || s->snap.suffix_len == 0 ||
	    s->snap.suffix_len > KV_SUFFIX_BUF || s->snap.ref.len > pool_max_len())
		return 0;
	return 1;
}

/* A GET that goes on to memcached: count it and leave a ticket so the reply
 * may fill the kernel. */
static __always_inline void ticket(__u64 h, __u64 now)
{
	__u64 *clk = clock_slot(KV_CLOCK_WRITES);
	__u32 k = h & WSLOT_MASK;
	struct kv_ticket *t = bpf_map_lookup_elem(&kv_tickets, &k);

	if (clk && t) {
		t->seq = *clk;
		t->ts = now;
	}
}

static __always_inline void miss(__u64 h, __u64 now)
{
	ticket(h, now);
	stat(KV_MISSES);
}

/* Reply lengths from a snapshot, in registers the verifier can follow. */
#define REPLY_LENS(s, klen, slen, vlen)                                  \
	do {                                                             \
		klen = (s)->req.keylen;                                  \
		slen = (s)->snap.suffix_len & (KV_SUFFIX_BUF - 1);       \
		vlen = (s)->snap.ref.len;                                \
		asm volatile("" : "+r"(klen), "+r"(slen), "+r"(vlen));  \
	} while (0)

/* Copies the snapshot's blocks with STORE(off, ptr, n); clears good when a
 * block is gone or was recycled during its copy. */
#define COPY_BLOCKS(s, STORE, voff, vlen, good)                                   \
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {                     \
		__u32 off = i * pool_block_size, n;                               \
		__u64 idx;                                                        \
		__u8 *b;                                                          \
		if (i >= (s)->snap.ref.nblocks)                                   \
			break;                                                    \
		idx = (s)->snap.ref.idx[i];                                       \
		n = (vlen) - off < pool_block_size ? (vlen) - off : pool_block_size; \
		b = pool_block_get(idx);                                          \
		if (!b || !LEN_IN(n, pool_block_size) ||                          \
		    STORE((voff) + off, b + POOL_BLOCK_HDR, n) || !pool_block_intact(b, idx)) { \
			good = 0;                                                 \
			break;                                                    \
		}                                                                 \
	}

/* Makes room for want bytes: at the tail, else at the head (moving the
 * 50 bytes of headers forward). */
static __always_inline int xdp_grow(struct xdp_md *ctx, struct kv_scratch *s, __u32 plen, __u32 want)
{
	int d = (int)want - (int)plen;

	if (bpf_xdp_adjust_tail(ctx, d) == 0)
		return 0;
	if (d <= 0 || d > 512 || bpf_xdp_adjust_head(ctx, -d))
		return -1;
	if (bpf_xdp_load_bytes(ctx, d, s->hdr, HDRS) || bpf_xdp_store_bytes(ctx, 0, s->hdr, HDRS))
		return -1;
	return 0;
}

#define XDP_STORE(off, ptr, n) bpf_xdp_store_bytes(ctx, off, ptr, n)

/* The block copies live in global functions: verified once, so the retry
 * loops around them do not multiply their cost (64 blocks fit the verifier). */
__global int kv_xdp_copy(struct xdp_md *ctx, struct kv_scratch *s, __u32 voff, __u32 vlen)
{
	int good = 1;

	if (!ctx || !s)
		return 0;
	COPY_BLOCKS(s, XDP_STORE, voff, vlen, good);
	return good;
}

/* One 8-byte store at offset off of the packet, if the frame's linear part
 * holds it; else return -1 from the caller. off must be bounded (<= 0xffff)
 * for the verifier. */
#define PKT_PUT8(data, end, off, v)                      \
	do {                                             \
		__u8 *__p = (__u8 *)(data) + (off);      \
		if ((void *)(__p + 8) > (end))           \
			return -1;                       \
		*(__u64 *)__p = (v);                     \
	} while (0)

/* Largest block copied in words; bigger ones go with one helper call each,
 * whose memcpy was as fast for a 1 KiB block (BenchmarkXDPGet fixed1024). */
#define DIRECT_BLOCK_MAX 256
#define DIRECT_VLEN_MASK 0x7fff /* values up to 32 KiB: far beyond an XDP frame */
#define DIRECT_VOFF_MASK 0x1ff  /* HDRS + 6 + key + suffix < 512 */

/* Block i of the snapshot s->snap to the packet at voff + i * block size,
 * for kv_xdp_reply_direct (whose rules it follows): a global function, so
 * its word loop is verified once, not once per block. 1: copied; 0: the
 * block was gone or recycled; -1: use the helpers. */
__global int kv_direct_block(struct xdp_md *ctx, struct kv_scratch *s, __u32 i, __u32 voff, __u32 vlen)
{
	__u32 bs = pool_block_size, boff, n, dst;
	void *data, *end;
	__u64 idx;
	__u8 *b;

	if (!ctx || !s || i >= CISTERN_POOL_MAX_BLOCKS ||
	    voff > DIRECT_VOFF_MASK || vlen > DIRECT_VLEN_MASK)
		return -1;
	barrier_var(i);
	barrier_var(voff);
	i &= 63; /* CISTERN_POOL_MAX_BLOCKS <= 64 */
	voff &= DIRECT_VOFF_MASK;
	boff = i * bs;
	if (boff >= vlen)
		return -1; /* cannot happen: nblocks fits len */
	n = vlen - boff;
	dst = voff + boff;
	if (dst > DIRECT_VLEN_MASK)
		return -1;
	barrier_var(dst);
	dst &= DIRECT_VLEN_MASK; /* a packet offset must be proved <= 0xffff */
	idx = s->snap.ref.idx[i]; /* i < CISTERN_POOL_MAX_BLOCKS, checked above */
	b = pool_block_get(idx);
	if (!b)
		return 0;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (bs > DIRECT_BLOCK_MAX || (void *)((__u8 *)data + dst + bs) > end) {
		/* A big block, or a short last one too near the frame's end for
		 * a whole-block bounds check: one helper call. */
		if (!LEN_IN(n, pool_block_size) || bpf_xdp_store_bytes(ctx, dst, b + POOL_BLOCK_HDR, n))
			return -1;
		return pool_block_intact(b, idx) ? 1 : 0;
	}
	{
		/* The whole block fits before the frame's end: one bounds check
		 * for all its words (the verifier knows bs, a read-only
		 * constant). A last block shorter than bs spills < 8 bytes into
		 * "\r\nEND\r\n", which is written after it. */
		__u8 *p = (__u8 *)data + dst;

		for (__u32 j = 0; j < DIRECT_BLOCK_MAX / 8; j++) {
			if (j >= bs / 8 || j * 8 >= n)
				break;
			*(__u64 *)(p + j * 8) = *(__u64 *)(b + POOL_BLOCK_HDR + j * 8);
		}
	}
	return pool_block_intact(b, idx) ? 1 : 0;
}

/* Writes the reply text of a hit (s->req's key, s->snap) at HDRS with
 * direct packet stores instead of a helper call per piece: 8-byte words,
 * each piece's last word spilling < 8 bytes into the next piece, which is
 * written after it (the value's spill lands in "\r\nEND\r\n", 7 bytes).
 * Every store is bounds-checked against data_end, so an unusual frame (not
 * linear) falls back to the helpers. 1: written; 0: a block was gone or
 * recycled during its copy (retry); -1: use kv_xdp_copy and the helpers. */
__global int kv_xdp_reply_direct(struct xdp_md *ctx, struct kv_scratch *s, __u32 klen, __u32 slen,
				 __u32 vlen)
{
	__u32 nb;
	__u64 voff, w;
	void *data, *end;

	if (!ctx || !s || klen == 0 || klen > KV_KEY_MAX || slen == 0 ||
	    slen > KV_SUFFIX_BUF - 1 || vlen > pool_max_len() || vlen > DIRECT_VLEN_MASK)
		return -1;
	/* Masks the verifier sees on every kernel (it may not carry the checks
	 * above over to the registers clang uses); barrier_var keeps clang from
	 * dropping them as redundant. They change no value. */
	barrier_var(klen);
	barrier_var(slen);
	barrier_var(vlen);
	klen &= KV_KEY_BUF - 1;
	slen &= KV_SUFFIX_BUF - 1;
	vlen &= DIRECT_VLEN_MASK;
	nb = s->snap.ref.nblocks;
	if (nb > CISTERN_POOL_MAX_BLOCKS)
		return -1;
	voff = HDRS + 6 + klen + slen;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	__builtin_memcpy(&w, "VALUE __", 8);
	PKT_PUT8(data, end, HDRS, w);
	for (__u32 i = 0; i < KV_KEY_BUF / 8; i++) {
		if (i * 8 >= klen)
			break;
		PKT_PUT8(data, end, HDRS + 6 + i * 8, ((__u64 *)s->req.key)[i]);
	}
	for (__u32 i = 0; i < KV_SUFFIX_BUF / 8; i++) {
		if (i * 8 >= slen)
			break;
		PKT_PUT8(data, end, HDRS + 6 + klen + i * 8, ((__u64 *)s->snap.suffix)[i]);
	}
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		int r;

		if (i >= nb)
			break;
		r = kv_direct_block(ctx, s, i, voff, vlen);
		if (r <= 0)
			return r;
	}
	/* The blocks' calls may have moved nothing, but the verifier forgets
	 * packet bounds across them: reload. */
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	{
		__u8 *p = (__u8 *)data + voff + vlen;

		if ((void *)(p + 7) > end)
			return -1;
		/* "\r\nEND\r\n" as two overlapping words */
		*(__u32 *)p = 0x4e450a0d;       /* \r \n E N */
		*(__u32 *)(p + 3) = 0x0a0d444e; /* N D \r \n */
	}
	return 1;
}

/* Fills s->req.ref's fresh blocks with bytes bytes at off of the packet. */
__global int kv_xdp_fill(struct xdp_md *ctx, struct kv_scratch *s, __u32 off0, __u32 bytes)
{
	__u32 bs = pool_block_size;

	if (!ctx || !s)
		return -1;
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		__u32 off = i * bs, c;
		__u8 *b;

		if (i >= s->req.ref.nblocks)
			break;
		c = bytes - off < bs ? bytes - off : bs;
		b = pool_block_get(s->req.ref.idx[i]);
		if (!b || !LEN_IN(c, bs) || bpf_xdp_load_bytes(ctx, off0 + off, b + POOL_BLOCK_HDR, c))
			return -1;
	}
	return 0;
}

/* Answers the GET of key s->req (hash h) from the pool with XDP_TX. When the
 * frame has no room for the reply, it marks the packet in its metadata for
 * kv_ingress (TC), which can reallocate; when the value is absent, a miss. */
__global int kv_serve_get(struct xdp_md *ctx, struct kv_scratch *s, __u64 h, __u32 poff, __u64 now)
{
	__u32 plen0, plen, text = poff + MC_HDR;

	if (!ctx || !s)
		return XDP_PASS;
	plen0 = plen = ctx->data_end - ctx->data;
	for (int attempt = 0; attempt < POOL_READ_RETRIES; attempt++) {
		__u32 klen, slen, vlen, voff, want;
		int good = 1;

		int snap = kv_snapshot(s, h, now);

		if (snap < 0) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		if (!snap) {
			miss(h, now ? now : bpf_ktime_get_ns());
			if (plen != plen0)
				return restore_get(ctx, s, text, plen, plen0);
			return XDP_PASS;
		}
		REPLY_LENS(s, klen, slen, vlen);
		if (!LEN_IN(klen, KV_KEY_MAX) || !LEN_IN(slen, KV_SUFFIX_BUF - 1) || vlen > pool_max_len())
			return XDP_PASS;
		/* "VALUE " key suffix value "\r\nEND\r\n" */
		voff = text + 6 + klen + slen;
		want = voff + vlen + 7;
		if (xdp_grow(ctx, s, plen, want)) {
			if (plen != plen0)
				return restore_get(ctx, s, text, plen, plen0);
			return to_tc(ctx);
		}
		plen = want;
		good = text == HDRS ? kv_xdp_reply_direct(ctx, s, klen, slen, vlen) : -1;
		if (good < 0) {
			bpf_xdp_store_bytes(ctx, text, "VALUE ", 6);
			bpf_xdp_store_bytes(ctx, text + 6, s->req.key, klen);
			bpf_xdp_store_bytes(ctx, text + 6 + klen, s->snap.suffix, slen);
			good = kv_xdp_copy(ctx, s, voff, vlen);
			if (good)
				bpf_xdp_store_bytes(ctx, voff + vlen, "\r\nEND\r\n", 7);
		}
		if (!good) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		goto reply;
	}
	stat(KV_READ_FAILURES);
	stat(KV_MISSES);
	return restore_get(ctx, s, text, plen, plen0);

reply: {
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)ip + sizeof(*ip);

	if ((void *)(udp + 1) > end)
		return XDP_DROP;
	turn_around(eth, ip, udp, plen);
	stat(KV_HITS);
	policy_event(h, EVICT_EV_ACCESS, 0);
	return XDP_TX;
}
}

/* "set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n" over UDP:
 * written through to the kernel copy (set.bpf.h); the packet goes on to
 * memcached. */
__global int kv_udp_set(struct xdp_md *ctx, struct kv_scratch *s, __u32 n, __u32 text, __u32 tlen)
{
	__u64 flags, exptime, bytes, h, now = bpf_ktime_get_ns();
	__u32 dataoff;
	int ke, fe, ee, be, le, eo, copied;
	__u8 crlf[2];

	if (!ctx || !s)
		return 0;
	ke = kv_scan_token(s, n, s->keystart);
	if (ke <= (int)s->keystart || ke - s->keystart > KV_KEY_MAX || !at(s, n, ke, ' '))
		goto bad;
	h = kv_take_key(s, s->keystart, ke - s->keystart);
	fe = kv_parse_num(s, n, kv_skip_sp(s, n, ke));
	flags = s->num;
	if (fe < 0 || flags > 0xffffffffULL || !at(s, n, fe, ' '))
		goto bad_key;
	ee = kv_parse_num(s, n, kv_skip_sp(s, n, fe));
	exptime = s->num;
	if (ee < 0 || !at(s, n, ee, ' '))
		goto bad_key;
	be = kv_parse_num(s, n, kv_skip_sp(s, n, ee));
	bytes = s->num;
	if (be < 0)
		goto bad_key;
	le = kv_skip_sp(s, n, be);
	if (token_is(s, n, le, "noreply", 7))
		le = kv_skip_sp(s, n, le + 7);
	eo = eol_at(s, n, le);
	if (!eo)
		goto bad_key;
	dataoff = le + eo;
	/* The datagram must hold exactly the data and its "\r\n": anything else
	 * memcached refuses, so the kernel must not store it either. */
	if ((__u64)dataoff + bytes + 2 != tlen ||
	    bpf_xdp_load_bytes(ctx, text + dataoff + bytes, crlf, 2) || crlf[0] != '\r' || crlf[1] != '\n')
		goto bad_key;

	if (!kv_set_begin(s, h, flags, exptime, bytes, now))
		return 0;
	copied = kv_xdp_fill(ctx, s, text + dataoff, bytes) == 0;
	if (!copied)
		stat(KV_PASS_MALFORMED);
	kv_set_end(s, h, copied);
	return 0;
bad_key:
	/* memcached may still store something under this key: the kernel
	 * copy goes. */
	note_write(h, now);
	kv_invalidate(s, h);
	stat(KV_PASS_SYNTAX);
	return 0;
bad:
	/* A write whose key the kernel cannot read: every key goes. */
	flush_all(now);
	stat(KV_UDP_FLUSHES);
	stat(KV_PASS_SYNTAX);
	return 0;
}

/* Invalidates every key a client's TCP segment writes, before memcached
 * sees it; a segment that cannot be parsed flushes the whole cache. */
__global int kv_tcp_writes(struct xdp_md *ctx, struct kv_scratch *s, __u32 tseq, __u32 poff, __u32 plen)
{
	__u64 now = bpf_ktime_get_ns();
	struct tcp_flow_key fk;
	__u32 *next, pos = 0;

	if (!ctx || !s || plen == 0)
		return 0;
	/* The key on the stack: older verifiers (6.1) refuse a map key in a
	 * global function's memory argument (s). */
	__builtin_memcpy(&fk, &s->fk, sizeof(fk));
	next = bpf_map_lookup_elem(&kv_tcp_flows, &fk);
	if (next) {
		__s32 d = (__s32)(*next - tseq);

		if (d >= (__s32)plen)
			return 0; /* all value data */
		if (d > 0)
			pos = d;
	}
	for (int c = 0; c < TCP_MAX_CMDS; c++) {
		__u32 n = plen - pos;
		int cmd, le;

		if (pos >= plen) {
			bpf_map_delete_elem(&kv_tcp_flows, &fk);
			return 0;
		}
		CLAMP(n, BUF - 1);
		if (n == 0 || bpf_xdp_load_bytes(ctx, poff + pos, s->pkt, LEN1(n)))
			goto flush;
		kv_req_line(s, n);
		le = s->ln.le;
		if (le <= 0) {
			cmd = kv_classify(s, n);
			if (cmd == CMD_SET || cmd == CMD_STORE || cmd == CMD_DELETE || cmd == CMD_MSET ||
			    cmd == CMD_MWRITE || cmd == CMD_FLUSH || cmd == CMD_NONE)
				goto flush; /* a write (maybe) whose line this segment does not hold */
			bpf_map_delete_elem(&kv_tcp_flows, &fk);
			return 0; /* a long read command: the next segment starts afresh */
		}
		cmd = s->ln.cmd;
		if (s->ln.why) {
			if (cmd != CMD_NONE)
				goto flush; /* memcached's answer to a bad write line is not ours to guess */
			pos += le;  /* unknown command: memcached answers ERROR */
			continue;
		}
		if (cmd == CMD_FLUSH || cmd == CMD_GAT)
			flush_all(now);
		if (cmd == CMD_SET || cmd == CMD_STORE || cmd == CMD_DELETE || cmd == CMD_MSET || cmd == CMD_MWRITE) {
			if ((s->ln.flags & LN_B64) || kv_key_write(s, n, now))
				goto flush;
			stat(KV_TCP_INVALIDATIONS);
		}
		pos += le + s->ln.data;
		if (pos > plen) {
			__u32 nx = tseq + pos;

			bpf_map_update_elem(&kv_tcp_flows, &fk, &nx, BPF_ANY);
			return 0;
		}
	}
	if (pos >= plen) {
		bpf_map_delete_elem(&kv_tcp_flows, &fk);
		return 0;
	}
flush:
	flush_all(now);
	bpf_map_delete_elem(&kv_tcp_flows, &fk);
	stat(KV_TCP_FLUSHES);
	return 0;
}

SEC("xdp")
int kv_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct kv_scratch *s;
	__u32 poff, plen, n;
	__u8 mc[MC_HDR];
	int cmd;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;

	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = (void *)ip + sizeof(*ip);
		__u32 doff, tot;

		if ((void *)(tcp + 1) > end || tcp->dest != bpf_htons(kv_port))
			return XDP_PASS;
		if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff))) {
			stat(KV_UNSUPPORTED);
			flush_all(bpf_ktime_get_ns()); /* its commands cannot be seen */
			return XDP_PASS;
		}
		doff = tcp->doff * 4;
		tot = bpf_ntohs(ip->tot_len);
		if (doff < sizeof(*tcp) || tot < sizeof(*ip) + doff)
			return XDP_PASS;
		{
			/* A connection in kv_socks: its verdict (tcp_verdict.bpf.h) reads
			 * every request before memcached, writes included. */
			struct kv_conn_key ck = {
				.lip = ip->daddr, .rip = ip->saddr,
				.lport = bpf_ntohs(tcp->dest), .rport = tcp->source,
			};

			if (bpf_map_lookup_elem(&kv_conns, &ck))
				return XDP_PASS;
		}
		s = scratch();
		if (!s)
			return XDP_PASS;
		s->fk.saddr = ip->saddr;
		s->fk.daddr = ip->daddr;
		s->fk.sport = tcp->source;
		s->fk.dport = tcp->dest;
		kv_tcp_writes(ctx, s, bpf_ntohl(tcp->seq), sizeof(*eth) + sizeof(*ip) + doff,
			      tot - sizeof(*ip) - doff);
		return XDP_PASS;
	}

	if (ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	{
		struct udphdr *udp = (void *)ip + sizeof(*ip);

		if ((void *)(udp + 1) > end || udp->dest != bpf_htons(kv_port))
			return XDP_PASS;
		if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff))) {
			stat(KV_UNSUPPORTED);
			return XDP_PASS;
		}
		plen = bpf_ntohs(udp->len);
		poff = sizeof(*eth) + sizeof(*ip) + sizeof(*udp);
		if (plen < sizeof(*udp) + MC_HDR || poff + plen - sizeof(*udp) > (__u32)(end - data)) {
			stat(KV_PASS_MALFORMED);
			return XDP_PASS;
		}
		plen -= sizeof(*udp);
	}
	/* Frame header: request id, sequence 0, 1 datagram, reserved. */
	if (bpf_xdp_load_bytes(ctx, poff, mc, MC_HDR))
		return XDP_PASS;
	if (mc[2] || mc[3] || mc[4] || mc[5] != 1) {
		stat(KV_MULTIPACKET);
		return XDP_PASS;
	}
	s = scratch();
	if (!s)
		return XDP_PASS;
	n = plen - MC_HDR;
	CLAMP(n, BUF - 1);
	if (n == 0 || bpf_xdp_load_bytes(ctx, poff + MC_HDR, s->pkt, LEN1(n))) {
		stat(KV_PASS_MALFORMED);
		return XDP_PASS;
	}
	cmd = kv_classify(s, n);
	switch (cmd) {
	case CMD_GET: {
		__u32 ks = s->keystart, tl = plen - MC_HDR;
		int ke = kv_scan_token(s, n, ks), j, eo;

		if (ke == TOK_LONG) {
			stat(KV_PASS_LONG);
			return XDP_PASS;
		}
		if (ke <= (int)ks) {
			stat(ke == TOK_SHORT ? KV_PASS_MALFORMED : KV_PASS_SYNTAX);
			return XDP_PASS;
		}
		j = kv_skip_sp(s, n, ke);
		eo = eol_at(s, n, j);
		if (!eo) {
			stat(j < (int)n ? KV_MULTIGET : KV_PASS_MALFORMED);
			return XDP_PASS;
		}
		if (j + eo != tl) {
			stat(KV_PASS_MALFORMED); /* more than one line in the datagram */
			return XDP_PASS;
		}
		if (ks != 4 || j != ke || eo != 2) {
			/* valid, but not "get <key>\r\n": a reply the kernel gives
			 * up on is restored in that form, so it leaves these to
			 * memcached */
			stat(KV_UNSUPPORTED);
			return XDP_PASS;
		}
		/* now 0: read the clock only where needed (a value with an
		 * expiry, a miss); a plain hit never does, which on a VM's TSC
		 * was a tenth of a GET's cost. */
		return kv_serve_get(ctx, s, kv_take_key(s, ks, ke - ks), poff, 0);
	}
	case CMD_SET:
		kv_udp_set(ctx, s, n, poff + MC_HDR, plen - MC_HDR);
		return XDP_PASS;
	case CMD_MSET:
	case CMD_MWRITE:
		kv_req_line(s, n);
		if (s->ln.flags & LN_B64) {
			flush_all(bpf_ktime_get_ns());
			stat(KV_UDP_FLUSHES);
			return XDP_PASS;
		}
		/* fall through */
	case CMD_STORE:
	case CMD_DELETE:
		if (kv_key_write(s, n, bpf_ktime_get_ns())) {
			/* a write whose key the kernel cannot read: every key goes */
			flush_all(bpf_ktime_get_ns());
			stat(KV_UDP_FLUSHES);
			stat(KV_PASS_SYNTAX);
		} else {
			stat(KV_DELETES);
		}
		return XDP_PASS;
	case CMD_FLUSH:
		flush_all(bpf_ktime_get_ns());
		return XDP_PASS;
	case CMD_GETS:
	case CMD_MGET:
		stat(KV_PASS_CAS);
		return XDP_PASS;
	case CMD_GAT:
		/* get-and-touch changes expiries the kernel copy does not follow */
		flush_all(bpf_ktime_get_ns());
		stat(KV_PASS_CAS);
		return XDP_PASS;
	case CMD_OTHER:
	case CMD_STATS:
	case CMD_QUIT:
		stat(KV_UNSUPPORTED);
		return XDP_PASS;
	default:
		stat(KV_PASS_SYNTAX);
		return XDP_PASS;
	}
}
