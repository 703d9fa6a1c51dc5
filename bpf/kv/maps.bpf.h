/* SPDX-License-Identifier: GPL-2.0 */
/*
 * maps.bpf.h - Kerby-KV's maps, constants, per-CPU scratch and counters
 * (part of kv.bpf.c).
 */
#define ETH_P_IP 0x0800
#define IPPROTO_UDP 17
#define IPPROTO_TCP 6
#define MC_HDR 8 /* memcached UDP frame header */
#define BUF 512
#define BUF_MASK (BUF - 1)
#define WSLOT_MASK (KV_WSLOTS - 1)
#define TCP_MAX_CMDS 16
#define HDRS (14 + 20 + 8 + MC_HDR) /* Ethernet, IPv4, UDP, memcached frame */
#define KV_META_SERVE 0xC15CE4E5    /* XDP metadata: "serve this GET in TC" */
#define KV_MARK 0xC15CE4E5          /* skb mark of replies built by kv_ingress */

const volatile __u16 kv_port = 11211;
const volatile __u64 kv_write_window_ns = 1000000;     /* 1 ms */
const volatile __u64 kv_fill_quarantine_ns = 50000000; /* 50 ms */
const volatile __u64 kv_ticket_ttl_ns = 1000000000;    /* 1 s */
const volatile __u32 kv_fifo_mask = 1023;              /* ring size - 1 */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* objects: set by the loader */
	__type(key, __u64);
	__type(value, struct kv_entry);
} kv_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KV_WSLOTS);
	__type(key, __u32);
	__type(value, struct kv_write);
} kv_writes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KV_WSLOTS);
	__type(key, __u32);
	__type(value, struct kv_ticket);
} kv_tickets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KV_CLOCK_MAX);
	__type(key, __u32);
	__type(value, __u64);
} kv_clock SEC(".maps");

/* --policy: 1 when an eviction policy (a cistern/evict.bpf.h object sharing
 * kv_events and kv_victims) decides what goes. Every CPU only queues events
 * (hits, fills, removals); one drainer applies them to the policy, which
 * keeps the pool below capacity minus a reserve, and kv_reap deletes the
 * victims it chose. docs/kerby-kv.md has the argument. */
const volatile __u32 kv_policy_on = 0;

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, EVICT_QUEUE_LEN);
	__type(value, struct evict_event);
} kv_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, EVICT_QUEUE_LEN);
	__type(value, struct evict_event);
} kv_victims SEC(".maps");

/* FIFO eviction ring of (hash, birth): the eviction without --policy, and
 * the fallback with one when the pool fills before the drainer ran. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024); /* kv_fifo_mask + 1: set by the loader */
	__type(key, __u32);
	__type(value, struct kv_fifo_slot);
} kv_fifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KV_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} kv_stats SEC(".maps");

struct tcp_flow_key {
	__u32 saddr, daddr;
	__u16 sport, dport;
};

/* One request line as memcached reads it (kv_req_line). */
struct kv_line {
	__s32 le, eol, cmd, ks, ke, numend;
	__u32 data, replies, why, flags;
	__u64 bytes;
	__u64 vflags; /* a reply's VALUE flags (kv_msg_reply) */
	__u64 vcas;   /* a gets reply's CAS unique, else 0 */
};

struct kv_scratch {
	__u8 pkt[BUF];        /* a copy of the memcached text being parsed */
	struct kv_body req;   /* key (+ suffix, ref) of the request at hand */
	struct kv_body snap;  /* a reader's snapshot of an entry */
	struct pool_ref old;  /* the version a writer replaced */
	/* template of a new entry; raw bytes, as a per-CPU value cannot hold a lock */
	__u8 fresh[sizeof(struct kv_entry)] __attribute__((aligned(8)));
	__u8 hdr[64];         /* headers being moved or rewritten */
	__u64 num;            /* kv_parse_num's result */
	__u32 keystart;       /* kv_classify's result */
	__u32 cmdend;
	struct kv_line ln;    /* kv_req_line's result */
	__u32 cas_len, stage_slen;
	__u8 casbuf[32];
	struct tcp_flow_key fk;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kv_scratch);
} kv_scratch_map SEC(".maps");

const volatile __u64 kv_fill_ttl_ns = 0; /* 0: fills live until evicted or written */

/* Global (non-static, noinline) functions are verified once, on their own,
 * with unknown scalar arguments: the parsing loops do not multiply with the
 * caller's paths. Their pointer arguments are nullable and checked. */
#define __global __attribute__((noinline))

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tcp_flow_key);
	__type(value, __u32); /* sequence number where the next command starts */
} kv_tcp_flows SEC(".maps");

static __always_inline void stat(__u32 s)
{
	__u64 *v = bpf_map_lookup_elem(&kv_stats, &s);

	if (v)
		*v += 1;
}

/* Readers of an entry take no lock: e->body.ref.ver is its version stamp.
 * Every writer, under the entry's lock, sets it to 0 first, then writes,
 * then sets the new version (unique: pool_reserve), each with an atomic
 * exchange, which orders the stores around it on every architecture. An
 * element is only deleted (and so recycled, whose copy of the template
 * writes no stamp) after kv_invalidate zeroed its stamp. A reader that sees
 * the same non-zero stamp before and after copying what it needs therefore
 * copied one published version whole, as if under the lock. */
static __always_inline void stamp_set(__u64 *ver, __u64 v)
{
	__sync_lock_test_and_set(ver, v);
}

/* Set by the loader where plain loads are not reordered with each other
 * (x86-64, TSO): the stamp is then read with plain loads. Elsewhere an
 * atomic fetch-or of 0, whose acquire/release semantics keep the copy's
 * loads between the two reads of the stamp. */
const volatile __u32 kv_tso = 0;

static __always_inline __u64 stamp_read(__u64 *ver)
{
	__u64 v;

	if (kv_tso) {
		asm volatile("" ::: "memory");
		v = *(volatile __u64 *)ver;
		asm volatile("" ::: "memory");
		return v;
	}
	return __sync_fetch_and_or(ver, 0);
}

/* --policy: tells the policy about a hit, fill or removal of h. */
static __always_inline void policy_event(__u64 h, __u32 op, __u32 size)
{
	struct evict_event ev = { .key = h, .size = size, .op = op };

	if (kv_policy_on && bpf_map_push_elem(&kv_events, &ev, 0))
		stat(KV_EVENTS_LOST);
}

static __always_inline __u64 *clock_slot(__u32 k)
{
	return bpf_map_lookup_elem(&kv_clock, &k);
}

static __always_inline struct kv_scratch *scratch(void)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(&kv_scratch_map, &k);
}

/* ---- TCP (tcp*.bpf.h): connections, staged replies ---- */

#define KV_LINE 256          /* a request line split across segments, kept */
#define KV_STAGE_BUF 8192   /* a segment's replies: 4 GETs of 1 KiB values fit */
#define KV_STAGE_PAD 512
#define KV_STAGE_MAX_LINES 8 /* GET lines answered from one segment */
#define KV_SQ 4              /* staged replies in flight per connection */
#define KV_TCP_LINES 1024    /* request lines counted per segment */
#define KV_MARKER 0x00564b00 /* "\0KV\0" little-endian */

struct kv_conn_key {
	__u32 lip, rip;
	__u32 lport, rport;
};

/* A reply the verdict staged, for kv_tcp_msg to swap in. */
struct kv_stage {
	__u32 len;    /* reply bytes */
	__u32 reqlen; /* bytes of the segment it answers */
	__u8 buf[KV_STAGE_BUF + KV_STAGE_PAD];
};

struct kv_conn {
	struct kv_scratch s; /* this connection's scratch: used under its lock */
	__s32 pending;       /* replies memcached owes */
	__u32 skip;          /* data bytes of a passed write still to come */
	__u32 part;          /* bytes of an incomplete request line in line[] */
	__u32 blind;
	/* memcached has sent on this connection, so its first read is over:
	 * only then does the verdict answer (kv_tcp_verdict, "first read") */
	__u32 replied;
	__u32 rskip;         /* reply data bytes still to come */
	__u32 out_left;      /* bytes still to come of a marked segment being sent */
	__u32 out_slot, out_off;
	__u32 shead, stail;  /* staged replies: st[shead % KV_SQ] leaves next */
	__u8 line[KV_LINE];
	/* Staged replies live with their connection: a slot is reused only
	 * after its reply left (at most KV_SQ in flight), however long the
	 * sockmap's worker takes to send them. */
	struct kv_stage st[KV_SQ];
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, struct kv_conn_key);
	__type(value, __u64);
} kv_socks SEC(".maps");

/* Allocated per connection (no preallocation): ~KV_SQ * KV_STAGE_BUF. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct kv_conn_key);
	__type(value, struct kv_conn);
} kv_conns SEC(".maps");

/* A zeroed kv_conn: the template of a new connection's state. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kv_conn);
} kv_conn_zero SEC(".maps");
