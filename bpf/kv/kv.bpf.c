// SPDX-License-Identifier: GPL-2.0
/*
 * kv.bpf.c - Kerby-KV: memcached GETs answered at XDP from values kept in a
 * Kerby pool (cistern/pool.bpf.h). memcached stays the source of truth.
 *
 *   kv_xdp     (XDP, server ingress)  UDP get hit: reply built in the packet,
 *              XDP_TX. Miss: ticket, pass. UDP set: new version written
 *              through, pass. UDP delete and other writes, TCP writes:
 *              invalidate before memcached sees them, pass.
 *   kv_egress  (TCX egress)           memcached's single-datagram GET replies
 *              fill the pool, unless a write to that key raced with them.
 *
 * Consistency (once memcached acknowledged a write, no GET answered here
 * returns an older value): the kernel copy is updated or invalidated before
 * memcached receives the write. A fill from a GET reply is accepted only if
 * no write to the key (or flush) happened after the GET missed, and none
 * within kv_fill_quarantine_ns — that covers memcached reordering a GET
 * before a write it received earlier. Two writes to one key closer than
 * kv_write_window_ns may reach memcached in either order, so the key is
 * invalidated instead of updated. The checks run under the entry's lock, so
 * a fill and a write cannot interleave. docs/kerby-kv.md has the argument.
 *
 * Every bound below is a mask or a size the verifier can see: packet bytes are
 * parsed from a 512-byte per-CPU copy indexed with & 511, keys live in
 * 256-byte buffers, copies are bounded by pool_block_size, and every helper
 * length is proved >= 1 (LEN1, LEN_IN) in a form the 6.1 verifier follows.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "cistern/pool.bpf.h"
#include "cistern/kv.h"
#include "cistern/evict.h"
#include "cistern/call.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define IPPROTO_UDP 17
#define IPPROTO_TCP 6
#define MC_HDR 8 /* memcached UDP frame header */
#define BUF 512
#define BUF_MASK (BUF - 1)
#define WSLOT_MASK (KV_WSLOTS - 1)
#define TCP_MAX_CMDS 4
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
	__u32 pad;
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

/* ---- parsing over the scratch copy (s->pkt, n bytes) ---- */

#define PK(s, j) ((s)->pkt[(j) & BUF_MASK])
/* A copy length the verifier can prove is in [1, BUF] (callers check n > 0). */
#define LEN1(n) ((((n) - 1) & BUF_MASK) + 1)

/* True when 1 <= n <= max, and then n is proved in [1, max] for a helper's
 * size argument on every kernel. Older verifiers (6.1) learn nothing from
 * "n != 0", only from <, <=, >, >=: so the one check is made on n - 1 (0
 * wraps to U32_MAX) and 1 is added back after it. barrier_var, on the
 * checked path only, hides from the compiler that the sum equals n (it would
 * reuse n's register, whose minimum is unproved) and keeps the add after the
 * branch. */
#define LEN_IN(n, max)                          \
	({                                      \
		__u32 __m = (n) - 1;            \
		int __ok = __m < (max);         \
		if (__ok) {                     \
			barrier_var(__m);       \
			(n) = __m + 1;          \
		}                               \
		__ok;                           \
	})

/* n = min(n, max) for the parsers, which bound every index with a mask
 * (PK). barrier_var hides n <= max from the compiler, which would otherwise
 * drop those masks as redundant and leave the bound to the verifier: but the
 * min is compiled as copy, test the original, go on with the copy, and
 * older verifiers (6.1) do not carry a test of a 32-bit register over to
 * its copy. */
#define CLAMP(n, max)                   \
	do {                            \
		if ((n) > (max))        \
			(n) = (max);    \
		barrier_var(n);         \
	} while (0)

/* Index of the first ' ' or '\r' at or after start; -1 if none within a key's
 * length, -2 on a control character. */
__global int kv_scan_token(struct kv_scratch *s, __u32 n, __u32 start)
{
	if (!s || n > BUF - 1)
		return -1;
	for (__u32 i = 0; i < KV_KEY_MAX + 2; i++) {
		__u32 j = start + i;
		__u8 c;

		if (j >= n)
			return -1;
		c = PK(s, j);
		if (c == ' ' || c == '\r')
			return j;
		if (c < 0x21 || c == 0x7f)
			return -2;
	}
	return -1;
}

/* Decimal number (1..10 digits) at start into s->num; index after it or -1. */
__global int kv_parse_num(struct kv_scratch *s, __u32 n, __u32 start)
{
	__u64 v = 0;
	__u32 i;

	if (!s)
		return -1;
	for (i = 0; i < 11; i++) {
		__u32 j = start + i;
		__u8 c;

		if (j >= n)
			return -1;
		c = PK(s, j);
		if (c < '0' || c > '9')
			break;
		if (i == 10)
			return -1;
		v = v * 10 + (c - '0');
	}
	if (i == 0)
		return -1;
	s->num = v;
	return start + i;
}

/* Index just past the "\r\n" ending the line at or after start, or -1. */
__global int kv_line_end(struct kv_scratch *s, __u32 n, __u32 start)
{
	if (!s)
		return -1;
	for (__u32 i = 0; i < BUF - 1; i++) {
		__u32 j = start + i;

		if (j + 1 >= n)
			return -1;
		if (PK(s, j) == '\r' && PK(s, j + 1) == '\n')
			return j + 2;
	}
	return -1;
}

static __always_inline int at(struct kv_scratch *s, __u32 n, __u32 j, __u8 c)
{
	return j < n && PK(s, j) == c;
}

/* Copies the key [start, start+len) into s->req.key, zero-padded, and
 * returns its hash (FNV-1a, with the length mixed in). */
__global __u64 kv_take_key(struct kv_scratch *s, __u32 start, __u32 len)
{
	__u64 h = 0xcbf29ce484222325ULL;

	if (!s)
		return 0;
	__builtin_memset(s->req.key, 0, sizeof(s->req.key));
	for (__u32 i = 0; i < KV_KEY_MAX; i++) {
		__u8 c;

		if (i >= len)
			break;
		c = PK(s, start + i);
		s->req.key[i] = c;
		h = (h ^ c) * 0x100000001b3ULL;
	}
	s->req.keylen = len;
	return h ^ len;
}

enum cmd {
	CMD_NONE = 0,
	CMD_GET,
	CMD_GETS,    /* gets gat gats: reads memcached must answer */
	CMD_SET,
	CMD_STORE,   /* add replace append prepend cas: key written, data follows */
	CMD_DELETE,  /* delete incr decr touch: key written, no data */
	CMD_FLUSH,   /* flush_all */
	CMD_OTHER,   /* stats version verbosity: no key written */
};

static __always_inline int word(struct kv_scratch *s, __u32 n, __u32 at0, const char *w, __u32 len)
{
	for (__u32 i = 0; i < len; i++)
		if (!at(s, n, at0 + i, w[i]))
			return 0;
	return 1;
}

/* Classifies the command at the start of s->pkt; its key starts at s->keystart. */
__global int kv_classify(struct kv_scratch *s, __u32 n)
{
	if (!s)
		return CMD_NONE;
#define W(str, c)                                      \
	if (word(s, n, 0, str, sizeof(str) - 1)) {     \
		s->keystart = sizeof(str) - 1;         \
		return c;                              \
	}
	W("get ", CMD_GET);
	W("set ", CMD_SET);
	W("gets ", CMD_GETS);
	W("gat ", CMD_GETS);
	W("gats ", CMD_GETS);
	W("delete ", CMD_DELETE);
	W("incr ", CMD_DELETE);
	W("decr ", CMD_DELETE);
	W("touch ", CMD_DELETE);
	W("add ", CMD_STORE);
	W("replace ", CMD_STORE);
	W("append ", CMD_STORE);
	W("prepend ", CMD_STORE);
	W("cas ", CMD_STORE);
	W("flush_all", CMD_FLUSH);
	W("stats", CMD_OTHER);
	W("version", CMD_OTHER);
	W("verbosity", CMD_OTHER);
#undef W
	return CMD_NONE;
}

/* Appends v in decimal to s->req.suffix at pos; returns the end. */
static __always_inline __u32 put_num(struct kv_scratch *s, __u32 pos, __u64 v)
{
	__u8 tmp[16];
	__u32 n = 0;

	for (int i = 0; i < 10; i++) {
		tmp[i] = '0' + v % 10;
		v /= 10;
		n++;
		if (!v)
			break;
	}
	for (int i = 0; i < 10; i++) {
		if (i >= n)
			break;
		s->req.suffix[(pos + i) & (KV_SUFFIX_BUF - 1)] = tmp[(n - 1 - i) & 15];
	}
	return pos + n;
}

/* s->req.suffix = " <flags> <bytes>\r\n", formatted as memcached does. */
__global int kv_make_suffix(struct kv_scratch *s, __u64 flags, __u64 bytes)
{
	__u32 n;

	if (!s)
		return -1;
	s->req.suffix[0] = ' ';
	n = put_num(s, 1, flags & 0xffffffff);
	s->req.suffix[n & (KV_SUFFIX_BUF - 1)] = ' ';
	n = put_num(s, n + 1, bytes & 0xffffffff);
	s->req.suffix[n & (KV_SUFFIX_BUF - 1)] = '\r';
	s->req.suffix[(n + 1) & (KV_SUFFIX_BUF - 1)] = '\n';
	s->req.suffix_len = n + 2;
	return 0;
}

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
static __always_inline void miss(__u64 h, __u64 now)
{
	__u64 *clk = clock_slot(KV_CLOCK_WRITES);
	__u32 k = h & WSLOT_MASK;
	struct kv_ticket *t = bpf_map_lookup_elem(&kv_tickets, &k);

	if (clk && t) {
		t->seq = *clk;
		t->ts = now;
	}
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
 * written through to the kernel copy; the packet goes on to memcached. */
__global int kv_udp_set(struct xdp_md *ctx, struct kv_scratch *s, __u32 n, __u32 text, __u32 tlen)
{
	__u64 flags, exptime, bytes, h, now = bpf_ktime_get_ns();
	__u32 dataoff;
	int ke, fe, ee, be, le, conflict;
	__u8 crlf[2];

	if (!ctx || !s)
		return 0;
	ke = kv_scan_token(s, n, s->keystart);
	if (ke <= (int)s->keystart || ke - s->keystart > KV_KEY_MAX || !at(s, n, ke, ' '))
		goto bad;
	h = kv_take_key(s, s->keystart, ke - s->keystart);
	fe = kv_parse_num(s, n, ke + 1);
	flags = s->num;
	if (fe < 0 || flags > 0xffffffffULL || !at(s, n, fe, ' '))
		goto bad_key;
	ee = kv_parse_num(s, n, fe + 1);
	exptime = s->num;
	if (ee < 0 || !at(s, n, ee, ' '))
		goto bad_key;
	be = kv_parse_num(s, n, ee + 1);
	bytes = s->num;
	if (be < 0)
		goto bad_key;
	le = be;
	if (word(s, n, le, " noreply", 8))
		le += 8;
	if (!at(s, n, le, '\r') || !at(s, n, le + 1, '\n'))
		goto bad_key;
	dataoff = le + 2;
	/* The datagram must hold exactly the data and its "\r\n": anything else
	 * memcached refuses, so the kernel must not store it either. */
	if ((__u64)dataoff + bytes + 2 != tlen ||
	    bpf_xdp_load_bytes(ctx, text + dataoff + bytes, crlf, 2) || crlf[0] != '\r' || crlf[1] != '\n')
		goto bad_key;

	conflict = note_write(h, now);
	if (bytes > pool_max_len()) {
		stat(KV_OVERSIZE);
		kv_invalidate(s, h);
		return 0;
	}
	if (conflict) {
		stat(KV_WRITE_CONFLICTS);
		kv_invalidate(s, h);
		return 0;
	}
	if (exptime > 30 * 24 * 3600) { /* an absolute time: leave it to memcached */
		kv_invalidate(s, h);
		return 0;
	}
	s->req.expire_ns = exptime ? now + exptime * 1000000000ULL : 0;
	kv_make_suffix(s, flags, bytes);
	if (kv_alloc_value(s, bytes)) {
		stat(KV_POOL_FULL);
		kv_invalidate(s, h);
		return 0;
	}
	if (kv_xdp_fill(ctx, s, text + dataoff, bytes)) {
		pool_free(&s->req.ref);
		stat(KV_PARSE_ERRORS);
		kv_invalidate(s, h);
		return 0;
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
bad_key:
	note_write(h, now);
	kv_invalidate(s, h);
bad:
	stat(KV_PARSE_ERRORS);
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
		__u64 bytes;
		int e, le, cmd;

		if (pos >= plen) {
			bpf_map_delete_elem(&kv_tcp_flows, &fk);
			return 0;
		}
		CLAMP(n, BUF - 1);
		if (n == 0 || bpf_xdp_load_bytes(ctx, poff + pos, s->pkt, LEN1(n)))
			goto flush;
		cmd = kv_classify(s, n);
		if (cmd == CMD_NONE)
			goto flush;
		if (cmd == CMD_FLUSH)
			flush_all(now);
		if (cmd == CMD_SET || cmd == CMD_STORE || cmd == CMD_DELETE) {
			if (kv_key_write(s, n, now))
				goto flush;
			stat(KV_TCP_INVALIDATIONS);
		}
		le = kv_line_end(s, n, 0);
		if (le < 0) {
			if (cmd == CMD_SET || cmd == CMD_STORE)
				goto flush; /* cannot tell where its data ends */
			bpf_map_delete_elem(&kv_tcp_flows, &fk);
			return 0; /* a long read command: the next segment starts afresh */
		}
		if (cmd == CMD_SET || cmd == CMD_STORE) {
			/* <cmd> <key> <flags> <exptime> <bytes> ... */
			e = kv_scan_token(s, n, s->keystart);
			if (e < 0)
				goto flush;
			e = kv_parse_num(s, n, e + 1);
			if (e < 0)
				goto flush;
			e = kv_parse_num(s, n, e + 1);
			if (e < 0)
				goto flush;
			e = kv_parse_num(s, n, e + 1);
			bytes = s->num;
			if (e < 0 || bytes > (1 << 30))
				goto flush;
			le += bytes + 2;
		}
		pos += le;
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
			stat(KV_PARSE_ERRORS);
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
		stat(KV_PARSE_ERRORS);
		return XDP_PASS;
	}
	cmd = kv_classify(s, n);
	switch (cmd) {
	case CMD_GET: {
		__u32 ks = s->keystart;
		int ke = kv_scan_token(s, n, ks);

		if (ke > (int)ks && ke - ks <= KV_KEY_MAX && at(s, n, ke, ' ')) {
			stat(KV_MULTIGET);
			return XDP_PASS;
		}
		if (ke <= (int)ks || ke - ks > KV_KEY_MAX || !at(s, n, ke + 1, '\n') ||
		    ke + 2 != plen - MC_HDR) {
			stat(KV_PARSE_ERRORS);
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
	case CMD_STORE:
	case CMD_DELETE:
		if (kv_key_write(s, n, bpf_ktime_get_ns()))
			stat(KV_PARSE_ERRORS);
		else
			stat(KV_DELETES);
		return XDP_PASS;
	case CMD_FLUSH:
		flush_all(bpf_ktime_get_ns());
		return XDP_PASS;
	case CMD_GETS:
	case CMD_OTHER:
		stat(KV_UNSUPPORTED);
		return XDP_PASS;
	default:
		stat(KV_PARSE_ERRORS);
		return XDP_PASS;
	}
}

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

struct kv_reap_loop {
	struct kv_scratch *s;
	__u32 n;
};

static long kv_reap_step(__u64 i, void *arg)
{
	struct kv_reap_loop *lp = arg;
	struct evict_event ev;

	if (bpf_map_pop_elem(&kv_victims, &ev))
		return 1;
	if (kv_invalidate(lp->s, ev.key)) {
		stat(KV_EVICTIONS);
		lp->n++;
	}
	return 0;
}

/* --policy: deletes the victims the policy pushed onto kv_victims (called
 * by the drainer after evict_drain, see cistern/call.bpf.h). a->ret: how
 * many entries went. */
CISTERN_CALL(kv_reap, struct cistern_call_ret, a)
{
	struct kv_reap_loop lp = { .s = scratch() };

	a->ret = 0;
	if (!lp.s)
		return;
	bpf_loop(EVICT_QUEUE_LEN, kv_reap_step, &lp, 0);
	a->ret = lp.n;
}

/* For the client side of a veth pair: native XDP_TX frames are only received
 * by a peer that runs an XDP program itself. */
SEC("xdp")
int kv_xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
