// SPDX-License-Identifier: GPL-2.0
/*
 * kvgen.bpf.c - a kernel-side memcached UDP load generator, the technique of
 * xdp-tools' xdp-trafficgen: user space runs kvgen_tx with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES, so every run turns a frame into a GET and
 * transmits it out of the client's veth without a socket or a syscall per
 * request.
 *
 *   kvgen_tx       (PROG_RUN, live frames)  writes "get <key>\r\n" with the
 *                  next key of a precomputed zipfian stream, stamps the send
 *                  time into the request id and the source port, XDP_TX.
 *   kvgen_count    (XDP, client veth)       counts each reply, checks a
 *                  value against the checksum of the known preloaded value,
 *                  records the latency, and drops it: the client's stack
 *                  never runs.
 *   kvgen_reflect  (XDP, server veth)       bare XDP_TX reflector: the
 *                  ceiling of this path.
 *   kvgen_pass     (XDP, server veth)       XDP_PASS, so native frames from
 *                  the client's veth are received when memcached answers
 *                  alone (a veth hands XDP frames only to a peer with a
 *                  native XDP program).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define REQ_LEN 64     /* Ethernet 14, IPv4 20, UDP 8, frame 8, "get " key8 "\r\n" */
#define MC_OFF 42      /* memcached UDP frame header: request id first */
#define KEY_OFF 54     /* the 8 key bytes */
#define TEXT_MAX 1280  /* longest reply text checked (1 KiB values and their header) */
#define TS_SHIFT 6     /* timestamps in units of 64 ns: 31 bits last 137 s */
#define LAT_BUCKETS 256

volatile const __u16 kvgen_port = 11211;
volatile const __u32 kvgen_stream_mask = 0; /* stream length - 1 */
volatile const __u32 kvgen_keys = 0;

struct kvgen_tmpl {
	__u8 b[REQ_LEN];
};

/* What a correct reply to key k is: its text length after the frame header
 * and the checksum of that text (kvgen_count computes it; Go the same). */
struct kvgen_expect {
	__u32 len;
	__u32 pad;
	__u64 sum;
};

enum {
	KVGEN_REPLIES, /* every datagram from the server's port */
	KVGEN_HITS,    /* a VALUE whose length and checksum are right */
	KVGEN_MISSES,  /* END only */
	KVGEN_WRONG,   /* a VALUE of the wrong length, key or content */
	KVGEN_OTHER,   /* anything else (the reflector's echoed requests) */
	KVGEN_UNTIMED, /* replies without a send time (not ours) */
	KVGEN_NSTATS,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kvgen_tmpl);
} kvgen_template SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by the loader: the stream length */
	__type(key, __u32);
	__type(value, __u64); /* the key's 8 bytes */
} kvgen_stream SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kvgen_cursor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by the loader: one per key */
	__type(key, __u32);
	__type(value, struct kvgen_expect);
} kvgen_expects SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KVGEN_NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} kvgen_stats SEC(".maps");

/* Latency in quarter-octaves of nanoseconds (see lat_bucket). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LAT_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} kvgen_latency SEC(".maps");

static __always_inline void stat(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&kvgen_stats, &i);

	if (v)
		*v += 1;
}

SEC("xdp")
int kvgen_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct kvgen_tmpl *t;
	__u32 zero = 0, idx;
	__u64 *cur, *key, ts;
	struct udphdr *udp;

	if (data + REQ_LEN > end)
		return XDP_ABORTED;
	t = bpf_map_lookup_elem(&kvgen_template, &zero);
	cur = bpf_map_lookup_elem(&kvgen_cursor, &zero);
	if (!t || !cur)
		return XDP_ABORTED;
	/* Each CPU walks the stream from its own place. */
	idx = (__u32)(*cur + bpf_get_smp_processor_id() * 7919u) & kvgen_stream_mask;
	*cur += 1;
	key = bpf_map_lookup_elem(&kvgen_stream, &idx);
	if (!key)
		return XDP_ABORTED;
	/* Recycled frames keep what the far end wrote into them: rewrite all. */
	__builtin_memcpy(data, t->b, REQ_LEN);
	*(__u64 *)(data + KEY_OFF) = *key;
	ts = bpf_ktime_get_ns() >> TS_SHIFT;
	udp = data + 34;
	udp->source = bpf_htons(0x8000 | ((ts >> 16) & 0x7fff));
	*(__u16 *)(data + MC_OFF) = bpf_htons(ts & 0xffff);
	return XDP_TX;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r;
}

/* Bucket of ns: values below 4 have their own; above, 4 per octave. */
static __always_inline __u32 lat_bucket(__u64 ns)
{
	__u32 msb;

	if (ns < 4)
		return ns;
	msb = log2_u64(ns);
	return (msb * 4 + ((ns >> (msb - 2)) & 3)) & (LAT_BUCKETS - 1);
}

#define SUM_K 0x9E3779B97F4A7C15ULL

SEC("xdp")
int kvgen_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)(ip + 1);
	__u8 *mc = (void *)(udp + 1), *text = mc + 8, *p;
	struct kvgen_expect *e;
	__u16 port, reqid;
	__u32 k = 0, len;
	__u64 a = 0, b = 0, w = 0;

	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP || ip->ihl != 5 || udp->source != bpf_htons(kvgen_port))
		return XDP_PASS;
	stat(KVGEN_REPLIES);
	if (text > (__u8 *)end)
		goto other;
	port = bpf_ntohs(udp->dest);
	reqid = ((__u16)mc[0] << 8) | mc[1];
	if (port & 0x8000) {
		__u64 sent = ((__u64)(port & 0x7fff) << 16) | reqid;
		__u64 now = bpf_ktime_get_ns() >> TS_SHIFT;
		__u32 b = lat_bucket(((now - sent) & 0x7fffffff) << TS_SHIFT);
		__u64 *c = bpf_map_lookup_elem(&kvgen_latency, &b);

		if (c)
			*c += 1;
	} else {
		stat(KVGEN_UNTIMED);
	}
	if (text + 14 > (__u8 *)end)
		goto short_text;
	if (text[0] != 'V' || text[1] != 'A' || text[2] != 'L' || text[3] != 'U' || text[4] != 'E' || text[5] != ' ')
		goto short_text;
	for (int i = 0; i < 8; i++) {
		__u8 c = text[6 + i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			goto wrong;
		k = k << 4 | d;
	}
	if (k >= kvgen_keys)
		goto wrong;
	e = bpf_map_lookup_elem(&kvgen_expects, &k);
	len = (__u8 *)end - text;
	if (!e || len != e->len || len > TEXT_MAX)
		goto wrong;
	p = text;
	/* Fletcher-style: order-sensitive, one add per word. Eight words per
	 * bounds check while they fit (the check per word cost as much as the
	 * sum), then word by word. */
	for (int i = 0; i < TEXT_MAX / 64; i++) {
		if (p + 64 > (__u8 *)end)
			break;
		for (int j = 0; j < 8; j++) {
			a += ((__u64 *)p)[j];
			b += a;
		}
		p += 64;
	}
	for (int i = 0; i < 7; i++) {
		if (p + 8 > (__u8 *)end)
			break;
		a += *(__u64 *)p;
		b += a;
		p += 8;
	}
	for (int i = 0; i < 7; i++) {
		if (p + 1 > (__u8 *)end)
			break;
		w |= (__u64)*p << (i * 8);
		p++;
	}
	a += w;
	b += a;
	if (((b * SUM_K) ^ a) != e->sum)
		goto wrong;
	stat(KVGEN_HITS);
	return XDP_DROP;
short_text:
	if (text + 5 <= (__u8 *)end && text[0] == 'E' && text[1] == 'N' && text[2] == 'D' && text[3] == '\r' &&
	    text[4] == '\n') {
		stat(KVGEN_MISSES);
		return XDP_DROP;
	}
other:
	stat(KVGEN_OTHER);
	return XDP_DROP;
wrong:
	stat(KVGEN_WRONG);
	return XDP_DROP;
}

SEC("xdp")
int kvgen_reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = (void *)(ip + 1);
	__u8 mac[6];
	__u32 a;
	__u16 pt;

	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP || ip->ihl != 5 || udp->dest != bpf_htons(kvgen_port))
		return XDP_PASS;
	__builtin_memcpy(mac, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, mac, 6);
	a = ip->saddr; /* swapping addresses keeps the header checksum */
	ip->saddr = ip->daddr;
	ip->daddr = a;
	pt = udp->source;
	udp->source = udp->dest;
	udp->dest = pt;
	udp->check = 0;
	return XDP_TX;
}

SEC("xdp")
int kvgen_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
