/* SPDX-License-Identifier: GPL-2.0 */
/*
 * egress.bpf.h - kv_egress: memcached's GET replies fill the pool
 * (part of kv.bpf.c).
 */
/* ---- TC egress: fill from memcached's GET replies ---- */

/* Stores "VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n" (one value, one
 * datagram) if one of our GETs missed on that key and no write raced it. */
__global int kv_fill(struct __sk_buff *skb, struct kv_scratch *s, __u32 poff, __u32 tlen)
{
	__u32 n, k, bs = pool_block_size, dataoff;
	__u64 flags, bytes, h, now = bpf_ktime_get_ns(), tseq;
	struct kv_ticket *t;
	struct kv_write *w;
	int ke, fe, be;
	__u8 tail[7];

	if (!skb || !s)
		return 0;
	n = tlen;
	CLAMP(n, BUF - 1);
	if (n < 12 || bpf_skb_load_bytes(skb, poff, s->pkt, LEN1(n)))
		return 0;
	if (!word(s, n, 0, "VALUE ", 6))
		return 0;
	ke = kv_scan_token(s, n, 6);
	if (ke <= 6 || ke - 6 > KV_KEY_MAX || !at(s, n, ke, ' '))
		return 0;
	fe = kv_parse_num(s, n, ke + 1);
	flags = s->num;
	if (fe < 0 || !at(s, n, fe, ' '))
		return 0;
	be = kv_parse_num(s, n, fe + 1);
	bytes = s->num;
	if (be < 0 || !at(s, n, be, '\r') || !at(s, n, be + 1, '\n'))
		return 0; /* also a gets reply, which carries a cas value */
	dataoff = be + 2;
	if ((__u64)dataoff + bytes + 7 != tlen ||
	    bpf_skb_load_bytes(skb, poff + dataoff + bytes, tail, 7) ||
	    tail[0] != '\r' || tail[1] != '\n' || tail[2] != 'E' || tail[3] != 'N' || tail[4] != 'D')
		return 0;

	h = kv_take_key(s, 6, ke - 6);
	k = h & WSLOT_MASK;
	t = bpf_map_lookup_elem(&kv_tickets, &k);
	if (!t || !t->ts || now - t->ts > kv_ticket_ttl_ns)
		return 0; /* no GET of ours missed on this key lately */
	tseq = t->seq;
	if (bytes > pool_max_len()) {
		stat(KV_OVERSIZE);
		return 0;
	}
	w = wslot(h);
	if (!w || w->seq > tseq || !settled(w->ts, now)) {
		stat(KV_FILL_REJECTED);
		return 0;
	}
	kv_make_suffix(s, flags, bytes);
	s->req.expire_ns = kv_fill_ttl_ns ? now + kv_fill_ttl_ns : 0;
	__builtin_memset(s->req.cas, 0, sizeof(s->req.cas));
	if (kv_alloc_value(s, bytes)) {
		stat(KV_POOL_FULL);
		return 0;
	}
	for (__u32 i = 0; i < CISTERN_POOL_MAX_BLOCKS; i++) {
		__u32 off = i * bs, c;
		__u8 *b;

		if (i >= s->req.ref.nblocks)
			break;
		c = bytes - off < bs ? bytes - off : bs;
		b = pool_block_get(s->req.ref.idx[i]);
		if (!b || !LEN_IN(c, bs) || bpf_skb_load_bytes(skb, poff + dataoff + off, b + POOL_BLOCK_HDR, c)) {
			pool_free(&s->req.ref);
			return 0;
		}
	}
	s->req.seq = next_seq();
	if (kv_publish(s, h, 1, tseq)) {
		pool_free(&s->req.ref);
		stat(KV_FILL_REJECTED);
		return 0;
	}
	stat(KV_FILLS);
	return 0;
}

SEC("tc")
int kv_egress(struct __sk_buff *skb)
{
	struct {
		struct iphdr ip;
		struct udphdr udp;
		__u8 mc[MC_HDR];
	} hdr;
	__u32 plen;
	struct kv_scratch *s;

	if (skb->mark == KV_MARK || skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &hdr, sizeof(hdr)))
		return TCX_NEXT; /* not memcached's, or our own reply */
	if (hdr.ip.protocol != IPPROTO_UDP || hdr.udp.source != bpf_htons(kv_port) || hdr.ip.ihl != 5)
		return TCX_NEXT;
	if (hdr.mc[2] || hdr.mc[3] || hdr.mc[4] || hdr.mc[5] != 1)
		return TCX_NEXT; /* multi-datagram reply */
	plen = bpf_ntohs(hdr.udp.len);
	if (plen < sizeof(struct udphdr) + MC_HDR)
		return TCX_NEXT;
	s = scratch();
	if (s)
		kv_fill(skb, s, sizeof(struct ethhdr) + sizeof(hdr), plen - sizeof(struct udphdr) - MC_HDR);
	return TCX_NEXT;
}
