/* CBUF client library. The fast path (alloc, free, send, cbuf2buf of a
 * mapped buffer) touches only shared memory; the manager is called only to
 * collect (free list empty) and to map another component's pool the first
 * time one of its buffers arrives. Alloc and free of a never-shared buffer
 * go through a per-thread cache (like glibc's tcache or a magazine
 * allocator): plain loads and stores, no locked instruction; the cache is
 * filled from and drained to the component's shared free lists a batch at a
 * time, one CAS per batch (docs/cbuf.md, "Thread cache"). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cbuf.h"
#include "cbuf_layout.h"

struct cbuf_client {
	int sock;
	pid_t pid; /* process that connected: a forked child must connect itself */
	uint32_t slot, max_bufs;
	uint64_t pool_bytes;
	struct cbuf_hdr *hdr;
	struct cbuf_meta *meta;
	size_t meta_len;
	const struct cbuf_dir *dir;
	size_t dir_len;
	unsigned char *pools[CBUF_MAX_COMPONENTS]; /* own pool read-write, others read-only */
	size_t pool_len[CBUF_MAX_COMPONENTS];
	pthread_mutex_t slow;                      /* socket and ring consumer */
	uint64_t token;                            /* cbuf_self */
	int exporting;
	uint16_t *owngen;                          /* exporting: generation mapped at each own index */
	struct xent *xb[CBUF_MAX_COMPONENTS];      /* pools mapped one buffer at a time */
	uint8_t xmode[CBUF_MAX_COMPONENTS];        /* 1: that slot's pool is mapped buffer by buffer */
	uint32_t map_epoch[CBUF_MAX_COMPONENTS];   /* hdr->slot_epoch when pools[]/xb[] were filled */
};

/* One buffer of a pool mapped buffer by buffer (another uid's, or an
 * exporting owner's): its own read-only mapping. */
struct xent {
	unsigned char *p;
	size_t len;
	uint16_t gen; /* 0: none */
};

static struct cbuf_client C = {.sock = -1, .slow = PTHREAD_MUTEX_INITIALIZER};

/* Thread cache: per size class, up to tc_cap[k] indexes of own never-shared
 * buffers that this thread freed or took from the free list in a batch.
 * A cached buffer keeps one reference (its word is exactly CBUF_REF1, its
 * next CBUF_NEXT_CACHED): the manager sees it in use, never takes it back
 * from under the cache, and when the process dies it is reclaimed like any
 * buffer the process held. Up to TC_PAGES pages per class per thread. */
#define TC_PAGES 64u
#define TC_MAX TC_PAGES
static const uint16_t tc_cap[CBUF_CLASSES] = {64, 32, 16, 8, 4, 2, 1};
struct tcache {
	uint64_t conn;  /* C.conn when filled: another connection's cache is dropped */
	uint64_t flush; /* hdr->tc_flush seen last: the manager asks caches back */
	uint16_t n[CBUF_CLASSES];
	uint32_t idx[CBUF_CLASSES][TC_MAX];
};
static __thread struct tcache *tc __attribute__((tls_model("initial-exec")));
/* Bumped at every connect and disconnect, and in a forked child: thread
 * caches of an earlier connection (or of the parent) are dropped unused. */
static uint64_t conn_gen = 1;
static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#define SUB(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_ACQ_REL)
/* Statistics are informational: a relaxed load and store (no locked
 * instruction on the fast path; concurrent threads may lose a count). */
#define STAT(f) __atomic_store_n(&C.hdr->f, __atomic_load_n(&C.hdr->f, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int xchg(const struct cbuf_msg *m, struct cbuf_reply *r, int *fds, int nfds)
{
	if (send(C.sock, m, sizeof(*m), MSG_NOSIGNAL) != (ssize_t)sizeof(*m))
		return -errno;
	char cbufspace[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = {.iov_base = r, .iov_len = sizeof(*r)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbufspace, .msg_controllen = sizeof(cbufspace)};
	ssize_t n = recvmsg(C.sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < (ssize_t)sizeof(*r))
		return n < 0 ? -errno : -EPROTO;
	int got = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int tmp[4];
		memcpy(tmp, CMSG_DATA(c), sizeof(int) * (k > 4 ? 4 : k));
		for (int i = 0; i < k && i < 4; i++) {
			if (got < nfds)
				fds[got++] = tmp[i];
			else
				close(tmp[i]);
		}
	}
	if (r->status)
		return r->status;
	return got == nfds ? 0 : -EPROTO;
}

static inline uint64_t gidx(uint32_t slot, uint32_t idx) { return (uint64_t)slot * C.max_bufs + idx; }

static inline unsigned size_class(size_t size)
{
	size_t pages = (size + CBUF_PAGE - 1) / CBUF_PAGE;
	return pages <= 1 ? 0 : 64 - (unsigned)__builtin_clzll((unsigned long long)pages - 1);
}

/* Pops up to want buffers of class k with one CAS into out; returns how
 * many. The chain walked between the load and the CAS is stable when the
 * CAS succeeds: the tag changes on every push and pop. */
static unsigned pop_batch(unsigned k, uint32_t *out, unsigned want)
{
	uint64_t *head = &C.hdr->free_heads[k];
	uint64_t h = LOAD(head);
	for (;;) {
		uint32_t top = (uint32_t)h;
		if (!top)
			return 0;
		if (top > C.max_bufs) { /* our own list is corrupt: drop it */
			STORE(head, ((h >> 32) + 1) << 32);
			return 0;
		}
		unsigned n = 0;
		uint32_t cur = top;
		while (cur && n < want) {
			out[n++] = cur - 1;
			uint32_t nx = LOAD(&C.meta[gidx(C.slot, cur - 1)].next);
			cur = nx == CBUF_NEXT_END || nx > C.max_bufs ? 0 : nx;
		}
		uint64_t nh = ((h >> 32) + 1) << 32 | cur;
		if (__atomic_compare_exchange_n(head, &h, nh, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return n;
	}
}

/* Pushes n buffers of class k (their counter words already 0) as one chain
 * with one CAS. */
static void push_batch(unsigned k, const uint32_t *idx, unsigned n)
{
	if (!n)
		return;
	for (unsigned i = 0; i + 1 < n; i++)
		STORE(&C.meta[gidx(C.slot, idx[i])].next, idx[i + 1] + 1);
	uint64_t *head = &C.hdr->free_heads[k];
	struct cbuf_meta *last = &C.meta[gidx(C.slot, idx[n - 1])];
	uint64_t h = LOAD(head), nh;
	do {
		uint32_t top = (uint32_t)h;
		STORE(&last->next, top ? top : CBUF_NEXT_END);
		nh = ((h >> 32) + 1) << 32 | (uint64_t)(idx[0] + 1);
	} while (!__atomic_compare_exchange_n(head, &h, nh, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
}

static void push_free(uint32_t idx, unsigned k) { push_batch(k, &idx, 1); }

/* Pops one buffer of class k; -1 when the list is empty. */
static int64_t pop_free(unsigned k)
{
	uint32_t idx;
	return pop_batch(k, &idx, 1) ? (int64_t)idx : -1;
}

static void free_slow(cbuf_t id, struct cbuf_meta *m, const struct cbuf_dir *d, uint64_t w);

/* Returns n cached buffers of class k (the oldest, at the bottom) to the
 * shared free list. Each word goes from CBUF_REF1 to 0 with a plain store:
 * nothing else writes the word of a never-shared buffer its owner holds
 * (the manager changes words only of unreferenced or sent buffers). */
static void tc_drain(struct tcache *t, unsigned k, unsigned n)
{
	uint32_t out[TC_MAX];
	unsigned m = 0;
	if (n > t->n[k])
		n = t->n[k];
	for (unsigned i = 0; i < n; i++) {
		uint32_t idx = t->idx[k][i];
		struct cbuf_meta *mm = &C.meta[gidx(C.slot, idx)];
		uint64_t w = LOAD(&mm->cnt);
		if (w != CBUF_REF1) {
			/* flagged or counted while cached (an application's use of
			 * a freed id): the ordinary last free decides */
			const struct cbuf_dir *d = &C.dir[gidx(C.slot, idx)];
			STORE(&mm->next, 0);
			free_slow(CBUF_ID(LOAD(&d->gen), C.slot, idx), mm, d, SUB(&mm->cnt, CBUF_REF1));
			continue;
		}
		__atomic_store_n(&mm->cnt, 0, __ATOMIC_RELAXED);
		out[m++] = idx;
	}
	push_batch(k, out, m); /* the CAS publishes the stores above */
	memmove(t->idx[k], t->idx[k] + n, (t->n[k] - n) * sizeof(uint32_t));
	t->n[k] -= n;
}

static void tc_drain_all(struct tcache *t)
{
	for (unsigned k = 0; k < CBUF_CLASSES; k++)
		tc_drain(t, k, t->n[k]);
}

/* Thread exit: this thread's cache goes back to the free lists. */
static void tc_exit(void *p)
{
	struct tcache *t = p;
	if (t && C.hdr && t->conn == LOAD(&conn_gen))
		tc_drain_all(t);
	free(t);
	tc = NULL;
}

static void tc_atfork_child(void) { ADD(&conn_gen, 1); }

static void tc_init_once(void)
{
	pthread_key_create(&tc_key, tc_exit);
	pthread_atfork(NULL, NULL, tc_atfork_child);
}

/* This thread's cache, valid for the current connection; NULL only when
 * it cannot be allocated (the caller takes the shared lists). */
static inline struct tcache *tc_get(void)
{
	struct tcache *t = tc;
	uint64_t g = __atomic_load_n(&conn_gen, __ATOMIC_RELAXED);
	if (__builtin_expect(t && t->conn == g, 1)) {
		uint64_t f = __atomic_load_n(&C.hdr->tc_flush, __ATOMIC_RELAXED);
		if (__builtin_expect(t->flush != f, 0)) {
			t->flush = f;
			tc_drain_all(t);
		}
		return t;
	}
	if (!t) {
		if (!(t = calloc(1, sizeof(*t))))
			return NULL;
		tc = t;
		pthread_setspecific(tc_key, t);
	}
	/* another connection's (or the parent's) buffers: not ours to touch */
	memset(t->n, 0, sizeof(t->n));
	t->conn = g;
	t->flush = __atomic_load_n(&C.hdr->tc_flush, __ATOMIC_RELAXED);
	return t;
}

/* Fills this thread's class-k cache with up to half its capacity from the
 * shared free list (one CAS) and returns how many it took. A buffer on the
 * free list is unreferenced and only its popper may touch it (the manager
 * takes free buffers back by popping them too), so it becomes cached by
 * plain stores. */
static unsigned tc_fill(struct tcache *t, unsigned k)
{
	uint32_t got[TC_MAX];
	unsigned want = (tc_cap[k] + 1) / 2, n = pop_batch(k, got, want), m = t->n[k];
	for (unsigned i = 0; i < n; i++) {
		struct cbuf_meta *mm = &C.meta[gidx(C.slot, got[i])];
		uint64_t w = LOAD(&mm->cnt);
		if (w) {
			/* not a clean free buffer (a manager that flags free buffers
			 * inconsistent, or a corrupt list): acknowledge the flag and
			 * leave it off every list; if it is garbage the next
			 * collection finds it */
			STORE(&mm->next, 0);
			if (w & CBUF_F_INCONSISTENT)
				SUB(&mm->cnt, CBUF_F_INCONSISTENT);
			continue;
		}
		__atomic_store_n(&mm->cnt, CBUF_REF1, __ATOMIC_RELAXED);
		__atomic_store_n(&mm->next, CBUF_NEXT_CACHED, __ATOMIC_RELAXED);
		t->idx[k][m++] = got[i];
	}
	t->n[k] = m;
	return n;
}

/* Moves what the manager put in the ring onto the free lists. */
static void drain_ring(void)
{
	uint32_t head = LOAD(&C.hdr->ring_head), tail = C.hdr->ring_tail;
	for (; tail != head; tail++) {
		uint32_t idx = C.hdr->ring[tail & (CBUF_RING - 1)];
		if (idx >= C.max_bufs)
			continue;
		const struct cbuf_dir *d = &C.dir[gidx(C.slot, idx)];
		uint16_t np = LOAD(&d->npages);
		if (!np || np > CBUF_MAX_PAGES)
			continue;
		push_free(idx, size_class((size_t)np * CBUF_PAGE));
	}
	STORE(&C.hdr->ring_tail, tail);
}

static int collect(unsigned k)
{
	struct cbuf_msg m = {.op = CBUF_OP_COLLECT, .arg = k};
	struct cbuf_reply r;
	uint64_t t0 = now_ns();
	pthread_mutex_lock(&C.slow);
	int err = xchg(&m, &r, NULL, 0);
	if (!err)
		drain_ring();
	pthread_mutex_unlock(&C.slow);
	__atomic_fetch_add(&C.hdr->blocked_ns, now_ns() - t0, __ATOMIC_RELAXED);
	STAT(collects);
	return err;
}

static void *map_fd(int fd, size_t len, int prot)
{
	void *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

int cbuf_connect(const char *path)
{
	if (C.sock >= 0 && C.pid == getpid())
		return -EISCONN;
	if (C.sock >= 0) {
		/* a forked child: drop its copies of the parent's connection and
		 * mappings (the parent keeps its own) and become a component */
		pthread_mutex_init(&C.slow, NULL);
		cbuf_disconnect();
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (!path || strlen(path) >= sizeof(sa.sun_path))
		return -EINVAL;
	strcpy(sa.sun_path, path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = -errno;
		close(s);
		return e;
	}
	C.sock = s;
	C.pid = getpid();
	pthread_once(&tc_once, tc_init_once);
	ADD(&conn_gen, 1);
	struct cbuf_msg m = {.op = CBUF_OP_HELLO};
	const char *e;
	if ((e = getenv("CBUF_PRIORITY")))
		m.arg = (uint32_t)atoi(e);
	if ((e = getenv("CBUF_QOS")))
		m.arg2 = (uint64_t)(atof(e) * 10000.0); /* percent -> ppm */
	if ((e = getenv("CBUF_NAME")))
		strncpy(m.name, e, sizeof(m.name) - 1);
	struct cbuf_reply r;
	int fds[3] = {-1, -1, -1};
	int err = xchg(&m, &r, fds, 3);
	if (err)
		goto fail;
	C.slot = r.arg;
	C.token = r.arg2;
	/* meta first: its header says how large everything is */
	struct cbuf_hdr h0;
	if (pread(fds[0], &h0, sizeof(h0), 0) != sizeof(h0) || h0.magic != CBUF_MAGIC || h0.version != CBUF_VERSION) {
		err = -EPROTO;
		goto fail;
	}
	C.max_bufs = h0.max_bufs;
	C.pool_bytes = h0.pool_bytes;
	C.meta_len = h0.meta_off + (size_t)CBUF_MAX_COMPONENTS * C.max_bufs * sizeof(struct cbuf_meta);
	C.dir_len = (size_t)CBUF_MAX_COMPONENTS * C.max_bufs * sizeof(struct cbuf_dir);
	C.hdr = map_fd(fds[0], C.meta_len, PROT_READ | PROT_WRITE);
	C.pools[C.slot] = map_fd(fds[1], C.pool_bytes, PROT_READ | PROT_WRITE);
	C.pool_len[C.slot] = C.pool_bytes;
	C.dir = map_fd(fds[2], C.dir_len, PROT_READ);
	fds[0] = fds[1] = fds[2] = -1;
	if (!C.hdr || !C.pools[C.slot] || !C.dir) {
		err = -ENOMEM;
		goto fail;
	}
	C.meta = (struct cbuf_meta *)((char *)C.hdr + h0.meta_off);
	C.map_epoch[C.slot] = LOAD(&C.hdr->slot_epoch[C.slot]);
	return 0;
fail:
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cbuf_disconnect();
	return err;
}

void cbuf_disconnect(void)
{
	/* every thread's cache belonged to this connection: the manager
	 * reclaims its buffers with the rest of the component */
	ADD(&conn_gen, 1);
	if (C.sock >= 0)
		close(C.sock);
	C.sock = -1;
	for (unsigned i = 0; i < CBUF_MAX_COMPONENTS; i++) {
		if (C.pools[i])
			munmap(C.pools[i], C.pool_len[i]);
		C.pools[i] = NULL;
		if (C.xb[i]) {
			for (uint32_t j = 0; j < C.max_bufs; j++)
				if (C.xb[i][j].p)
					munmap(C.xb[i][j].p, C.xb[i][j].len);
			free(C.xb[i]);
			C.xb[i] = NULL;
		}
		C.xmode[i] = 0;
		C.map_epoch[i] = 0;
	}
	free(C.owngen);
	C.owngen = NULL;
	C.exporting = 0;
	C.token = 0;
	if (C.hdr)
		munmap(C.hdr, C.meta_len);
	if (C.dir)
		munmap((void *)C.dir, C.dir_len);
	C.hdr = NULL;
	C.meta = NULL;
	C.dir = NULL;
}

/* An exporting owner maps each new buffer (its own memfd) at its place in
 * its pool the first time it allocates that generation of it. */
static int map_own(uint32_t idx, const struct cbuf_dir *d)
{
	uint16_t gen = LOAD(&d->gen);
	if (LOAD(&C.owngen[idx]) == gen)
		return 0;
	struct cbuf_msg m = {.op = CBUF_OP_BUFFD, .arg = idx, .arg2 = gen};
	struct cbuf_reply r;
	int fd = -1;
	pthread_mutex_lock(&C.slow);
	int err = xchg(&m, &r, &fd, 1);
	pthread_mutex_unlock(&C.slow);
	if (err)
		return err;
	void *want = C.pools[C.slot] + (size_t)LOAD(&d->page_off) * CBUF_PAGE;
	void *p = mmap(want, (size_t)LOAD(&d->npages) * CBUF_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	STORE(&C.owngen[idx], gen);
	return 0;
}

/* Hands out an own buffer this caller holds one reference of (idx); NULL if
 * an exporting owner cannot map it. */
static inline __attribute__((always_inline)) void *own_buffer(uint32_t idx, unsigned k, cbuf_t *id)
{
	const struct cbuf_dir *d = &C.dir[gidx(C.slot, idx)];
	if (C.exporting && map_own(idx, d)) {
		struct cbuf_meta *m = &C.meta[gidx(C.slot, idx)];
		SUB(&m->cnt, CBUF_REF1);
		push_free(idx, k);
		return NULL;
	}
	*id = CBUF_ID(LOAD(&d->gen), C.slot, idx);
	STAT(allocs);
	return C.pools[C.slot] + (size_t)LOAD(&d->page_off) * CBUF_PAGE;
}

void *cbuf_alloc(size_t size, cbuf_t *id)
{
	if (!C.hdr || size == 0 || size > (size_t)CBUF_MAX_PAGES * CBUF_PAGE)
		return NULL;
	unsigned k = size_class(size);
	struct tcache *t = tc_get();
	for (int tries = 0;;) {
		if (t) {
			if (__builtin_expect(t->n[k] == 0, 0) && !tc_fill(t, k)) {
				/* empty: maybe the ring already holds collected buffers */
				if (pthread_mutex_trylock(&C.slow) == 0) {
					drain_ring();
					pthread_mutex_unlock(&C.slow);
					tc_fill(t, k);
				}
			}
			if (t->n[k]) {
				uint32_t idx = t->idx[k][--t->n[k]];
				__atomic_store_n(&C.meta[gidx(C.slot, idx)].next, 0, __ATOMIC_RELAXED);
				return own_buffer(idx, k, id);
			}
			if (collect(k) || ++tries > 1000)
				return NULL;
			continue;
		}
		/* no thread cache (out of memory for it): the shared lists */
		int64_t idx = pop_free(k);
		if (idx < 0) {
			if (pthread_mutex_trylock(&C.slow) == 0) {
				drain_ring();
				pthread_mutex_unlock(&C.slow);
				if ((idx = pop_free(k)) >= 0)
					goto got;
			}
			if (collect(k) || ++tries > 1000)
				return NULL;
			continue;
		}
	got:;
		struct cbuf_meta *m = &C.meta[gidx(C.slot, (uint32_t)idx)];
		STORE(&m->next, 0);
		uint64_t w = ADD(&m->cnt, CBUF_REF1);
		if (w & CBUF_F_INCONSISTENT) {
			/* the manager took it back: acknowledge and take another */
			SUB(&m->cnt, CBUF_REF1 | CBUF_F_INCONSISTENT);
			continue;
		}
		return own_buffer((uint32_t)idx, k, id);
	}
}

static inline __attribute__((always_inline)) struct cbuf_meta *meta_of(cbuf_t id, const struct cbuf_dir **dp)
{
	uint32_t slot = CBUF_ID_SLOT(id), idx = CBUF_ID_IDX(id);
	if (!C.hdr || slot >= CBUF_MAX_COMPONENTS || idx >= C.max_bufs)
		return NULL;
	const struct cbuf_dir *d = &C.dir[gidx(slot, idx)];
	if (LOAD(&d->npages) == 0 || LOAD(&d->gen) != CBUF_ID_GEN(id))
		return NULL;
	*dp = d;
	return &C.meta[gidx(slot, idx)];
}

void cbuf_free(cbuf_t id)
{
	const struct cbuf_dir *d;
	struct cbuf_meta *m = meta_of(id, &d);
	if (!m)
		return;
	uint64_t w = LOAD(&m->cnt);
	if (w == CBUF_REF1 && CBUF_ID_SLOT(id) == C.slot) {
		/* the last reference of a never-shared own buffer: this thread's
		 * cache keeps it (and its reference), no locked instruction */
		uint32_t next = LOAD(&m->next);
		struct tcache *t = next == 0 ? tc_get() : NULL;
		if (t) {
			unsigned k = size_class((size_t)LOAD(&d->npages) * CBUF_PAGE);
			if (t->n[k] == tc_cap[k])
				tc_drain(t, k, (tc_cap[k] + 1) / 2);
			__atomic_store_n(&m->next, CBUF_NEXT_CACHED, __ATOMIC_RELAXED);
			t->idx[k][t->n[k]++] = CBUF_ID_IDX(id);
			STAT(frees);
			return;
		}
		if (next == CBUF_NEXT_CACHED)
			return; /* double free: it is cached already */
	}
	free_slow(id, m, d, SUB(&m->cnt, CBUF_REF1));
}

/* The locked free: w is the word before this free's ref-1. */
static void free_slow(cbuf_t id, struct cbuf_meta *m, const struct cbuf_dir *d, uint64_t w)
{
	if (CBUF_CNT(w, CBUF_REF_SHIFT) == 0) { /* double free: undo */
		ADD(&m->cnt, CBUF_REF1);
		return;
	}
	STAT(frees);
	if (CBUF_CNT(w, CBUF_REF_SHIFT) != 1)
		return;
	if (CBUF_ID_SLOT(id) == C.slot && CBUF_CNT(w, CBUF_SENT_SHIFT) == 0 && CBUF_CNT(w, CBUF_RECV_SHIFT) == 0 &&
	    !(w & (CBUF_F_RELINQUISH | CBUF_F_INCONSISTENT | CBUF_F_GRANTED))) {
		/* never shared: reusable at once */
		push_free(CBUF_ID_IDX(id), size_class((size_t)LOAD(&d->npages) * CBUF_PAGE));
		return;
	}
	if (w & CBUF_F_RELINQUISH) {
		struct cbuf_msg msg = {.op = CBUF_OP_RELINQUISH, .arg2 = id};
		send(C.sock, &msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	/* shared: garbage until the manager finds it dead everywhere */
}

void cbuf_send(cbuf_t id)
{
	const struct cbuf_dir *d;
	struct cbuf_meta *m = meta_of(id, &d);
	if (!m)
		return;
	ADD(&m->cnt, CBUF_SENT1);
	STAT(sends);
}

/* Where buffer id (entry d) is mapped here: in its owner's pool (same uid,
 * mapped whole on first use), or in its own read-only mapping, asked from
 * the manager the first time this generation of it arrives. */
static unsigned char *addr_slow(cbuf_t id, const struct cbuf_dir *d)
{
	uint32_t slot = CBUF_ID_SLOT(id), idx = CBUF_ID_IDX(id);
	uint16_t gen = CBUF_ID_GEN(id);
	unsigned char *p = NULL;
	pthread_mutex_lock(&C.slow);
	uint32_t ep = LOAD(&C.hdr->slot_epoch[slot]);
	if (slot != C.slot && C.map_epoch[slot] != ep) {
		/* the slot has a new component: every buffer of the one mapped
		 * before is dead (a slot is reused only then) */
		if ((p = C.pools[slot])) {
			STORE(&C.pools[slot], NULL);
			munmap(p, C.pool_len[slot]);
			p = NULL;
		}
		if (C.xb[slot])
			for (uint32_t j = 0; j < C.max_bufs; j++) {
				struct xent *e = &C.xb[slot][j];
				STORE(&e->gen, 0);
				if (e->p)
					munmap(e->p, e->len);
				e->p = NULL;
			}
		C.xmode[slot] = 0;
		STORE(&C.map_epoch[slot], ep);
	}
	if (!C.pools[slot] && !C.xmode[slot]) {
		struct cbuf_msg m = {.op = CBUF_OP_MAP, .arg = slot};
		struct cbuf_reply r;
		int fd;
		int err = xchg(&m, &r, &fd, 1);
		if (err == 0) {
			size_t len = r.arg2 ? (size_t)r.arg2 : C.pool_bytes;
			if ((p = map_fd(fd, len, PROT_READ))) {
				C.pool_len[slot] = len;
				STORE(&C.pools[slot], p);
			}
		} else if (err == -EXDEV) {
			if (!C.xb[slot])
				STORE(&C.xb[slot], calloc(C.max_bufs, sizeof(struct xent)));
			C.xmode[slot] = C.xb[slot] != NULL;
		}
	}
	if ((p = C.pools[slot])) {
		p += (size_t)LOAD(&d->page_off) * CBUF_PAGE;
	} else if (C.xmode[slot]) {
		struct xent *e = &C.xb[slot][idx];
		if (LOAD(&e->gen) == gen) {
			p = e->p;
		} else {
			struct cbuf_msg m = {.op = CBUF_OP_MAPBUF, .arg2 = id};
			struct cbuf_reply r;
			int fd;
			if (xchg(&m, &r, &fd, 1) == 0 && (p = map_fd(fd, (size_t)r.arg2, PROT_READ))) {
				/* the old generation at this index is dead everywhere */
				STORE(&e->gen, 0);
				if (e->p)
					munmap(e->p, e->len);
				e->p = p;
				e->len = (size_t)r.arg2;
				STORE(&e->gen, gen);
			}
		}
	}
	pthread_mutex_unlock(&C.slow);
	return p;
}

static inline unsigned char *addr_of(cbuf_t id, const struct cbuf_dir *d)
{
	uint32_t slot = CBUF_ID_SLOT(id);
	if (LOAD(&C.hdr->slot_epoch[slot]) != LOAD(&C.map_epoch[slot]))
		return addr_slow(id, d);
	unsigned char *p = LOAD(&C.pools[slot]);
	if (p)
		return p + (size_t)LOAD(&d->page_off) * CBUF_PAGE;
	struct xent *x = LOAD(&C.xb[slot]);
	if (x) {
		struct xent *e = &x[CBUF_ID_IDX(id)];
		if (LOAD(&e->gen) == CBUF_ID_GEN(id) && e->p)
			return e->p;
	}
	return addr_slow(id, d);
}

void *cbuf2buf(cbuf_t id, size_t size)
{
	const struct cbuf_dir *d;
	struct cbuf_meta *m = meta_of(id, &d);
	if (!m || size == 0 || size > (size_t)LOAD(&d->npages) * CBUF_PAGE)
		return NULL;
	unsigned char *p = addr_of(id, d);
	if (!p)
		return NULL;
	ADD(&m->cnt, CBUF_REF1 | CBUF_RECV1);
	/* the index may have been reused between the check and the count */
	if (LOAD(&d->gen) != CBUF_ID_GEN(id) || LOAD(&d->npages) == 0) {
		SUB(&m->cnt, CBUF_REF1 | CBUF_RECV1);
		return NULL;
	}
	STAT(recvs);
	return p;
}

/* Address of a buffer the caller already holds, without counting a
 * receive (aggregate helpers). */
__attribute__((visibility("hidden"))) void *cbuf__peek(cbuf_t id, size_t size)
{
	const struct cbuf_dir *d;
	struct cbuf_meta *m = meta_of(id, &d);
	if (!m || size > (size_t)LOAD(&d->npages) * CBUF_PAGE)
		return NULL;
	return addr_of(id, d);
}

size_t cbuf_size(cbuf_t id)
{
	const struct cbuf_dir *d;
	return meta_of(id, &d) ? (size_t)LOAD(&d->npages) * CBUF_PAGE : 0;
}

int cbuf_kernel_recv(cbuf_t *id, int timeout_ms)
{
	if (!C.hdr)
		return -ENOTCONN;
	struct cbuf_msg m = {.op = CBUF_OP_KRECV, .arg = timeout_ms > 0 ? (uint32_t)timeout_ms : 0};
	struct cbuf_reply r;
	pthread_mutex_lock(&C.slow);
	int err = xchg(&m, &r, NULL, 0);
	pthread_mutex_unlock(&C.slow);
	if (!err)
		*id = r.arg2;
	return err;
}

void cbuf_get_stats(struct cbuf_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (!C.hdr)
		return;
	s->allocs = LOAD(&C.hdr->allocs);
	s->frees = LOAD(&C.hdr->frees);
	s->sends = LOAD(&C.hdr->sends);
	s->recvs = LOAD(&C.hdr->recvs);
	s->collects = LOAD(&C.hdr->collects);
	s->blocked_ns = LOAD(&C.hdr->blocked_ns);
}

uint64_t cbuf_self(void)
{
	return C.hdr ? C.token : 0;
}

int cbuf_export(void)
{
	if (!C.hdr)
		return -ENOTCONN;
	if (C.exporting)
		return 0;
	uint16_t *g = calloc(C.max_bufs, sizeof(*g));
	if (!g)
		return -ENOMEM;
	struct cbuf_msg m = {.op = CBUF_OP_EXPORT};
	struct cbuf_reply r;
	pthread_mutex_lock(&C.slow);
	int err = xchg(&m, &r, NULL, 0);
	pthread_mutex_unlock(&C.slow);
	if (err) {
		free(g);
		return err;
	}
	C.owngen = g;
	STORE(&C.exporting, 1);
	return 0;
}

int cbuf_grant(cbuf_t id, uint64_t peer)
{
	if (!C.hdr)
		return -ENOTCONN;
	struct cbuf_msg m = {.op = CBUF_OP_GRANT, .arg2 = id};
	memcpy(m.name, &peer, sizeof(peer));
	struct cbuf_reply r;
	pthread_mutex_lock(&C.slow);
	int err = xchg(&m, &r, NULL, 0);
	pthread_mutex_unlock(&C.slow);
	return err;
}

int cbuf_send_to(cbuf_t id, uint64_t peer)
{
	int err = cbuf_grant(id, peer);
	if (!err)
		cbuf_send(id);
	return err;
}
