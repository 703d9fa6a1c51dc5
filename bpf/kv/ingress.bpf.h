/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ingress.bpf.h - kv_ingress: GET hits whose reply did not fit the XDP
 * frame, grown and sent back from tc (part of kv.bpf.c).
 */
/* ---- TC ingress: GET hits whose reply did not fit the XDP frame ---- */

#define SKB_STORE(off, ptr, n) bpf_skb_store_bytes(skb, off, ptr, n, 0)

__global int kv_skb_copy(struct __sk_buff *skb, struct kv_scratch *s, __u32 voff, __u32 vlen)
{
	int good = 1;

	if (!skb || !s)
		return 0;
	COPY_BLOCKS(s, SKB_STORE, voff, vlen, good);
	return good;
}

/* Writes "get <key>\r\n" back at the original length (kernel gave up). */
static __always_inline int skb_restore_get(struct __sk_buff *skb, struct kv_scratch *s, __u32 text, __u32 orig)
{
	__u32 klen = s->req.keylen;

	if (!LEN_IN(klen, KV_KEY_MAX) || bpf_skb_change_tail(skb, orig, 0))
		return TCX_DROP;
	bpf_skb_store_bytes(skb, text, "get ", 4, 0);
	bpf_skb_store_bytes(skb, text + 4, s->req.key, klen, 0);
	bpf_skb_store_bytes(skb, text + 4 + klen, "\r\n", 2, 0);
	return TCX_NEXT;
}

__global int kv_serve_get_skb(struct __sk_buff *skb, struct kv_scratch *s, __u64 h, __u64 now)
{
	__u32 plen0, text = HDRS - MC_HDR + MC_HDR;
	struct ethhdr *eth;
	struct iphdr *ip;
	struct udphdr *udp;
	void *data, *end;

	if (!skb || !s)
		return TCX_NEXT;
	plen0 = skb->len;
	for (int attempt = 0; attempt < POOL_READ_RETRIES; attempt++) {
		__u32 klen, slen, vlen, voff, want;
		int good = 1;

		int snap = kv_snapshot(s, h, now);

		if (snap < 0) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		if (!snap) {
			miss(h, now);
			return skb->len != plen0 ? skb_restore_get(skb, s, text, plen0) : TCX_NEXT;
		}
		REPLY_LENS(s, klen, slen, vlen);
		if (!LEN_IN(klen, KV_KEY_MAX) || !LEN_IN(slen, KV_SUFFIX_BUF - 1) || vlen > pool_max_len())
			return TCX_NEXT;
		voff = text + 6 + klen + slen;
		want = voff + vlen + 7;
		if (bpf_skb_change_tail(skb, want, 0)) {
			miss(h, now);
			return skb->len != plen0 ? skb_restore_get(skb, s, text, plen0) : TCX_NEXT;
		}
		bpf_skb_store_bytes(skb, text, "VALUE ", 6, 0);
		bpf_skb_store_bytes(skb, text + 6, s->req.key, klen, 0);
		bpf_skb_store_bytes(skb, text + 6 + klen, s->snap.suffix, slen, 0);
		good = kv_skb_copy(skb, s, voff, vlen);
		if (!good) {
			stat(KV_TORN_RETRIES);
			continue;
		}
		bpf_skb_store_bytes(skb, voff + vlen, "\r\nEND\r\n", 7, 0);
		if (bpf_skb_pull_data(skb, HDRS))
			return TCX_DROP;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		eth = data;
		ip = data + sizeof(*eth);
		udp = (void *)ip + sizeof(*ip);
		if ((void *)(udp + 1) > end)
			return TCX_DROP;
		turn_around(eth, ip, udp, want);
		skb->mark = KV_MARK;
		stat(KV_HITS);
		stat(KV_TC_HITS);
		policy_event(h, EVICT_EV_ACCESS, 0);
		return bpf_redirect(skb->ifindex, 0);
	}
	stat(KV_READ_FAILURES);
	stat(KV_MISSES);
	return skb_restore_get(skb, s, text, plen0);
}

SEC("tc")
int kv_ingress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *meta = (void *)(long)skb->data_meta;
	struct kv_scratch *s;
	__u32 n, tlen, ks;
	int ke;

	if (meta + sizeof(__u32) > data || *(__u32 *)meta != KV_META_SERVE)
		return TCX_NEXT;
	s = scratch();
	if (!s || skb->len < HDRS + 8)
		return TCX_NEXT;
	tlen = skb->len - HDRS;
	n = tlen;
	CLAMP(n, BUF - 1);
	if (bpf_skb_load_bytes(skb, HDRS, s->pkt, LEN1(n)))
		return TCX_NEXT;
	/* XDP checked it: a single-key get with nothing after the key */
	if (kv_classify(s, n) != CMD_GET)
		return TCX_NEXT;
	ks = s->keystart;
	ke = kv_scan_token(s, n, ks);
	if (ke <= (int)ks || ke - ks > KV_KEY_MAX)
		return TCX_NEXT;
	return kv_serve_get_skb(skb, s, kv_take_key(s, ks, ke - ks), bpf_ktime_get_ns());
}
