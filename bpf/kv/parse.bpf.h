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

/* memcached's tokenizer (proto_text.c, tokenize_command and
 * try_read_command_ascii), which Kerby-KV follows exactly: a line ends at
 * '\n', and a '\r' just before it is dropped; tokens are split on ' ' only,
 * a run of spaces is one separator, leading and trailing spaces make no
 * token. Any other byte, control characters included, belongs to a token
 * (memaslap's keys begin with eight 0x10 bytes). */

/* Length of the line end at j: 1 for "\n", 2 for "\r\n", 0 for none. */
static __always_inline int eol_at(struct kv_scratch *s, __u32 n, __u32 j)
{
	if (j >= n)
		return 0;
	if (PK(s, j) == '\n')
		return 1;
	if (PK(s, j) == '\r' && j + 1 < n && PK(s, j + 1) == '\n')
		return 2;
	return 0;
}

#define TOK_SHORT -1 /* no end within the bytes at hand */
#define TOK_LONG -3  /* longer than a key may be */

/* End of the token at start: the index of the ' ' or line end after it;
 * TOK_SHORT, or TOK_LONG past KV_KEY_MAX bytes. */
__global int kv_scan_token(struct kv_scratch *s, __u32 n, __u32 start)
{
	if (!s || n > BUF - 1)
		return TOK_SHORT;
	for (__u32 i = 0; i <= KV_KEY_MAX; i++) {
		__u32 j = start + i;
		__u8 c;

		if (j >= n)
			return TOK_SHORT;
		c = PK(s, j);
		if (c == ' ' || c == '\n')
			return j;
		if (c == '\r') {
			if (j + 1 >= n)
				return TOK_SHORT;
			if (PK(s, j + 1) == '\n')
				return j;
		}
	}
	return TOK_LONG;
}

/* The first index at or after j that is not a space (n if none). */
__global int kv_skip_sp(struct kv_scratch *s, __u32 n, __u32 j)
{
	if (!s)
		return n;
	for (__u32 i = 0; i < BUF; i++) {
		if (j + i >= n)
			return n;
		if (PK(s, j + i) != ' ')
			return j + i;
	}
	return n;
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

/* Decimal number of up to 20 digits (a CAS unique) at start into s->num;
 * the index after it, or -1 (none, or over 2^64). */
__global int kv_parse_num20(struct kv_scratch *s, __u32 n, __u32 start)
{
	__u64 v = 0;
	__u32 i;

	if (!s)
		return -1;
	for (i = 0; i < 21; i++) {
		__u32 j = start + i;
		__u8 c;

		if (j >= n)
			return -1;
		c = PK(s, j);
		if (c < '0' || c > '9')
			break;
		if (i == 20 || v > (~0ULL - 9) / 10)
			return -1;
		v = v * 10 + (c - '0');
	}
	if (i == 0)
		return -1;
	s->num = v;
	return start + i;
}

/* Index just past the '\n' ending the line at or after start, or -1. */
__global int kv_line_end(struct kv_scratch *s, __u32 n, __u32 start)
{
	if (!s)
		return -1;
	for (__u32 i = 0; i < BUF - 1; i++) {
		__u32 j = start + i;

		if (j >= n)
			return -1;
		if (PK(s, j) == '\n')
			return j + 1;
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
	CMD_GETS,    /* gets: served when the value's CAS is known */
	CMD_SET,
	CMD_STORE,   /* add replace append prepend cas: key written, data follows */
	CMD_DELETE,  /* delete incr decr touch: key written, no data */
	CMD_FLUSH,   /* flush_all */
	CMD_OTHER,   /* version verbosity mn me: no key written, one reply line */
	CMD_MGET,    /* mg: meta get, passed */
	CMD_MSET,    /* ms <key> <datalen> <flags>*: key written, data follows */
	CMD_MWRITE,  /* md ma: key written, no data */
	CMD_STATS,   /* stats: many lines */
	CMD_QUIT,    /* quit shutdown */
	CMD_GAT,     /* gat gats: get and touch; the keys' expiry changes */
};

static __always_inline int word(struct kv_scratch *s, __u32 n, __u32 at0, const char *w, __u32 len)
{
	for (__u32 i = 0; i < len; i++)
		if (!at(s, n, at0 + i, w[i]))
			return 0;
	return 1;
}

/* Classifies the command of the line at the start of s->pkt (after any
 * spaces): the whole first token must be a command's name. s->keystart is
 * the start of the token after it (or of the line end); s->cmdend the
 * command token's end. */
__global int kv_classify(struct kv_scratch *s, __u32 n)
{
	int c0, e, len;

	if (!s)
		return CMD_NONE;
	c0 = kv_skip_sp(s, n, 0);
	e = kv_scan_token(s, n, c0);
	if (e < 0 || c0 >= (int)n)
		return CMD_NONE;
	len = e - c0;
	s->cmdend = e;
	s->keystart = kv_skip_sp(s, n, e);
#define W(str, c)                                                             \
	if (len == sizeof(str) - 1 && word(s, n, c0, str, sizeof(str) - 1)) \
		return c;
	W("get", CMD_GET);
	W("set", CMD_SET);
	W("mg", CMD_MGET);
	W("gets", CMD_GETS);
	W("gat", CMD_GAT);
	W("gats", CMD_GAT);
	W("delete", CMD_DELETE);
	W("incr", CMD_DELETE);
	W("decr", CMD_DELETE);
	W("touch", CMD_DELETE);
	W("add", CMD_STORE);
	W("replace", CMD_STORE);
	W("append", CMD_STORE);
	W("prepend", CMD_STORE);
	W("cas", CMD_STORE);
	W("ms", CMD_MSET);
	W("md", CMD_MWRITE);
	W("ma", CMD_MWRITE);
	W("flush_all", CMD_FLUSH);
	W("version", CMD_OTHER);
	W("verbosity", CMD_OTHER);
	W("mn", CMD_OTHER);
	W("me", CMD_OTHER);
	W("stats", CMD_STATS);
	W("quit", CMD_QUIT);
	W("shutdown", CMD_QUIT);
#undef W
	return CMD_NONE;
}

/* 1 when the token at j is exactly w (ends at a space or the line end). */
static __always_inline int token_is(struct kv_scratch *s, __u32 n, __u32 j, const char *w, __u32 len)
{
	return word(s, n, j, w, len) && (at(s, n, j + len, ' ') || eol_at(s, n, j + len));
}

/* One request line at the start of s->pkt, as memcached reads it, into
 * s->ln. ln.le: index after its '\n' (0: no line end in the n bytes);
 * ln.cmd: enum cmd; ln.ks/ke: its key token (ke > ks when there is one);
 * ln.data: bytes of data that follow the line (storage commands, + 2 for
 * their "\r\n"); ln.replies: reply lines memcached sends for it (0 with
 * noreply); ln.why: when it is not a request the kernel can follow, the
 * pass counter to count (KV_PASS_*), else 0. ln.flags: LN_QUIET (a meta q
 * flag: the number of replies depends on the outcome), LN_B64 (meta b:
 * the key is base64). */
#define LN_QUIET 1
#define LN_B64 2
__global int kv_req_line(struct kv_scratch *s, __u32 n)
{
	int le, cmd, ks, ke, j, eol;

	if (!s)
		return -1;
	__builtin_memset(&s->ln, 0, sizeof(s->ln));
	le = kv_line_end(s, n, 0);
	if (le <= 0) {
		s->ln.why = n >= BUF - 1 ? KV_PASS_LONG : KV_PASS_MALFORMED;
		return -1;
	}
	s->ln.le = le;
	/* the line's content ends before "\r\n" or "\n" */
	eol = le - 1;
	if (eol > 0 && PK(s, eol - 1) == '\r')
		eol--;
	s->ln.eol = eol;
	cmd = kv_classify(s, le);
	s->ln.cmd = cmd;
	s->ln.replies = 1;
	ks = s->keystart;
	s->ln.ks = ks;
	switch (cmd) {
	case CMD_NONE:
		s->ln.why = KV_PASS_SYNTAX;
		return -1;
	case CMD_STATS:
	case CMD_QUIT:
		return 0;
	case CMD_OTHER:
	case CMD_FLUSH:
		break;
	default:
		ke = kv_scan_token(s, le, ks);
		if (ke == TOK_LONG) {
			s->ln.why = KV_PASS_LONG;
			return -1;
		}
		if (ke <= ks || ks >= eol) {
			s->ln.why = KV_PASS_SYNTAX;
			return -1;
		}
		s->ln.ke = ke;
	}
	/* noreply: the last token (set_noreply_maybe) */
	if (cmd == CMD_SET || cmd == CMD_STORE || cmd == CMD_DELETE || cmd == CMD_FLUSH || cmd == CMD_OTHER) {
		int e = eol;

		for (int i = 0; i < 16 && e > 0 && PK(s, e - 1) == ' '; i++)
			e--;
		if (e >= 8 && word(s, le, e - 7, "noreply", 7) && PK(s, e - 8) == ' ')
			s->ln.replies = 0;
	}
	if (cmd == CMD_MGET || cmd == CMD_MSET || cmd == CMD_MWRITE) {
		/* flags: single-letter tokens (with arguments) after the key */
		j = s->ln.ke;
		for (int i = 0; i < 24; i++) {
			j = kv_skip_sp(s, le, j);
			if (j >= eol)
				break;
			if (PK(s, j) == 'q')
				s->ln.flags |= LN_QUIET;
			if (PK(s, j) == 'b' && (at(s, le, j + 1, ' ') || j + 1 >= eol))
				s->ln.flags |= LN_B64;
			j = kv_scan_token(s, le, j);
			if (j < 0)
				break;
		}
	}
	if (cmd == CMD_SET || cmd == CMD_STORE) {
		/* <cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply] */
		j = kv_skip_sp(s, le, s->ln.ke);
		j = kv_parse_num(s, le, j);
		if (j < 0 || !at(s, le, j, ' '))
			goto syntax;
		j = kv_parse_num(s, le, kv_skip_sp(s, le, j));
		if (j < 0 || !at(s, le, j, ' '))
			goto syntax;
		j = kv_parse_num(s, le, kv_skip_sp(s, le, j));
		if (j < 0 || (!at(s, le, j, ' ') && !eol_at(s, le, j)) || s->num > (1 << 30))
			goto syntax;
		s->ln.data = s->num + 2;
		s->ln.bytes = s->num;
		s->ln.numend = j;
	}
	if (cmd == CMD_MSET) {
		j = kv_parse_num(s, le, kv_skip_sp(s, le, s->ln.ke));
		if (j < 0 || (!at(s, le, j, ' ') && !eol_at(s, le, j)) || s->num > (1 << 30))
			goto syntax;
		s->ln.data = s->num + 2;
		s->ln.bytes = s->num;
	}
	return 0;
syntax:
	s->ln.why = KV_PASS_SYNTAX;
	return -1;
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
