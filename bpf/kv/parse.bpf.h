/* SPDX-License-Identifier: GPL-2.0 */
/*
 * parse.bpf.h - memcached text parsing over the per-CPU scratch copy
 * (part of kv.bpf.c).
 */
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
