/* Peer programs for `cistern bench cbuf`, built by the bench with cc against
 * libcbuf (and a second time against jemalloc for the allocator baseline).
 *   cbufbench fast SOCK PAGES ITERS         fast-path ns per operation
 *   cbufbench rtt  SOCK MODE PAGES ITERS    round trip between two processes:
 *            MODE cbuf_poll | cbuf_block | pipe | unix_socket
 *   cbufbench gc   SOCK ITERS POOL_PAGES    amortised 1-page alloc+send+free
 *            while a child receives and frees (Figure 7 of the paper)
 *   cbufbench producer|consumer|interferer SOCK SHM ...   policy experiment
 *   cbufbench grant SOCK MODE ITERS        first receipt of a buffer against
 *            a repeated one: a forked receiver (MODE xuid: as nobody, the
 *            owner exporting and granting each buffer; export: same uid,
 *            owner exporting; pool: same uid, today's whole-pool path)
 * Results are "key value" lines on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include "cbuf.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "cbufbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void connect_or_die(const char *sock)
{
	int e = cbuf_connect(sock);
	if (e) {
		errno = -e;
		die("cbuf_connect");
	}
}

/* CPU time of this thread: the fast path is measured in CPU ns, so time
 * spent descheduled on busy shared cores does not count as cost. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;

/* ---- fast path ---- */
static int fast(const char *sock, size_t pages, long iters)
{
	size_t size = pages * 4096;
	connect_or_die(sock);
	cbuf_t id;
	/* warm: fill the free list of this class */
	enum { N = 128 }; /* per timed batch: amortises the clock read */
	cbuf_t ids[N];
	for (int i = 0; i < N; i++)
		if (!cbuf_alloc(size, &ids[i]))
			die("cbuf_alloc");
	for (int i = 0; i < N; i++)
		cbuf_free(ids[i]);

	uint64_t t0 = cpu_ns();
	for (long i = 0; i < iters; i++) {
		char *p = cbuf_alloc(size, &id);
		sink += (uintptr_t)p;
		cbuf_free(id);
	}
	printf("alloc_free_ns %.2f\n", (double)(cpu_ns() - t0) / iters);

	long rounds = iters / N, a = 0, f = 0;
	uint64_t ta = 0, tf = 0;
	for (long r = 0; r < rounds; r++) {
		uint64_t t = cpu_ns();
		for (int i = 0; i < N; i++)
			sink += (uintptr_t)cbuf_alloc(size, &ids[i]);
		ta += cpu_ns() - t;
		t = cpu_ns();
		for (int i = 0; i < N; i++)
			cbuf_free(ids[i]);
		tf += cpu_ns() - t;
		a += N;
		f += N;
	}
	printf("alloc_ns %.2f\nfree_ns %.2f\n", (double)ta / a, (double)tf / f);

	/* send and cbuf2buf on held buffers, equal numbers so the counts
	 * balance; spread over N buffers to stay far below 16-bit counts */
	for (int i = 0; i < N; i++)
		cbuf_alloc(size, &ids[i]);
	long per = iters / N > 4000 ? 4000 : iters / N, n = per * N;
	uint64_t t = cpu_ns();
	for (long k = 0; k < per; k++)
		for (int i = 0; i < N; i++)
			cbuf_send(ids[i]);
	printf("send_ns %.2f\n", (double)(cpu_ns() - t) / n);
	t = cpu_ns();
	for (long k = 0; k < per; k++)
		for (int i = 0; i < N; i++)
			sink += (uintptr_t)cbuf2buf(ids[i], size);
	printf("cbuf2buf_ns %.2f\n", (double)(cpu_ns() - t) / n);
	for (long k = 0; k < per; k++)
		for (int i = 0; i < N; i++)
			cbuf_free(ids[i]);
	for (int i = 0; i < N; i++)
		cbuf_free(ids[i]);

	t = cpu_ns();
	for (long i = 0; i < iters; i++) {
		char *p = malloc(size);
		p[0] = 1;
		sink += (uintptr_t)p;
		free(p);
	}
	printf("malloc_free_ns %.2f\n", (double)(cpu_ns() - t) / iters);
	cbuf_disconnect();
	return 0;
}

/* ---- round trip ---- */
struct box {
	_Atomic uint64_t id;
	_Atomic uint32_t seq; /* futex word */
	char pad[64 - 12];
};
struct shared {
	struct box to[2]; /* to[0]: parent -> child, to[1]: child -> parent */
	_Atomic int ready;
};

static void futex_wait(_Atomic uint32_t *w, uint32_t v)
{
	syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void box_put(struct box *b, uint64_t id, int block)
{
	atomic_store_explicit(&b->id, id, memory_order_release);
	atomic_fetch_add_explicit(&b->seq, 1, memory_order_release);
	if (block)
		futex_wake(&b->seq);
}

/* A poller spins this long before it yields its CPU: long enough to catch
 * a peer on the other core answering, short enough to hand the CPU over
 * when both sides share one. The iceoryx2 peer polls the same way. */
#define POLL_SPIN_NS 20000

/* pin_cpu moves the caller to one CPU (modulo the CPUs there are), unless
 * it was started on one CPU already (the _1core modes, under taskset). */
static void pin_cpu(int cpu)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 2)
		return;
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu % n, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static uint64_t box_get(struct box *b, uint32_t *last, int block)
{
	uint32_t s;
	uint64_t spin_until = 0;
	for (unsigned k = 0; (s = atomic_load_explicit(&b->seq, memory_order_acquire)) == *last; k++) {
		if (block) {
			futex_wait(&b->seq, *last);
			continue;
		}
		__builtin_ia32_pause();
		if ((k & 63) != 63)
			continue;
		uint64_t t = now_ns();
		if (!spin_until)
			spin_until = t + POLL_SPIN_NS;
		else if (t >= spin_until) {
			sched_yield();
			spin_until = 0;
		}
	}
	*last = s;
	return atomic_load_explicit(&b->id, memory_order_acquire);
}

static void cbuf_side(struct shared *sh, int me, size_t size, long iters, int block, int ping)
{
	static uint32_t last; /* persists across the warm-up and measured calls */
	struct box *out = &sh->to[me], *in = &sh->to[!me];
	for (long i = 0; i < iters; i++) {
		if (!ping) {
			uint64_t rid = box_get(in, &last, block);
			volatile char *q = cbuf2buf(rid, size);
			if (!q)
				die("cbuf2buf");
			sink += q[0];
			cbuf_free(rid);
		}
		cbuf_t id;
		char *p = cbuf_alloc(size, &id);
		if (!p)
			die("cbuf_alloc");
		p[0] = (char)i;
		cbuf_send(id);
		box_put(out, id, block);
		cbuf_free(id);
		if (ping) {
			uint64_t rid = box_get(in, &last, block);
			volatile char *q = cbuf2buf(rid, size);
			if (!q)
				die("cbuf2buf");
			sink += q[0];
			cbuf_free(rid);
		}
	}
}

static void xfer(int wfd, int rfd, char *buf, size_t size, int ping)
{
	if (ping) {
		for (size_t o = 0; o < size;) {
			ssize_t n = write(wfd, buf + o, size - o);
			if (n <= 0)
				die("write");
			o += n;
		}
	}
	for (size_t o = 0; o < size;) {
		ssize_t n = read(rfd, buf + o, size - o);
		if (n <= 0)
			die("read");
		o += n;
	}
	if (!ping) {
		for (size_t o = 0; o < size;) {
			ssize_t n = write(wfd, buf + o, size - o);
			if (n <= 0)
				die("write");
			o += n;
		}
	}
}

static int rtt(const char *sock, const char *mode, size_t pages, long iters)
{
	size_t size = pages * 4096;
	int is_cbuf = !strncmp(mode, "cbuf_", 5), block = !strcmp(mode, "cbuf_block");
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("mmap");
	int a[2], b[2]; /* a: parent->child, b: child->parent */
	if (!strcmp(mode, "pipe")) {
		if (pipe(a) || pipe(b))
			die("pipe");
	} else if (!strcmp(mode, "unix_socket")) {
		int s[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, s))
			die("socketpair");
		a[0] = s[1];
		a[1] = s[0];
		b[0] = s[0];
		b[1] = s[1];
	} else if (!is_cbuf) {
		fprintf(stderr, "cbufbench: unknown mode %s\n", mode);
		return 2;
	}
	/* warm-up past the first collections: fresh buffers fault their pages in */
	long warm = iters / 10 + 600;
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	char *buf = malloc(size);
	memset(buf, 1, size);
	/* Each peer on its own core in every mode (the bench pins the
	 * iceoryx2 peers the same way; the _1core modes put both on one).
	 * Floating, a blocking pair's round trip depended on where the
	 * scheduler woke the peer: a socket's wakeup is a sync one, which
	 * pulls the woken task to the waker's core, a futex's is not, and
	 * cbuf_block against iceoryx2_block moved from 1.3 to 2.5 between
	 * two runs. */
	pin_cpu(pid == 0 ? 1 : 0);
	if (pid == 0) {
		if (is_cbuf) {
			connect_or_die(sock);
			atomic_fetch_add(&sh->ready, 1);
			cbuf_side(sh, 1, size, warm + iters, block, 0);
			cbuf_disconnect();
		} else {
			for (long i = 0; i < warm + iters; i++)
				xfer(b[1], a[0], buf, size, 0);
		}
		_exit(0);
	}
	uint64_t t0 = 0;
	if (is_cbuf) {
		connect_or_die(sock);
		while (atomic_load(&sh->ready) == 0)
			usleep(100);
		cbuf_side(sh, 0, size, warm, block, 1);
		t0 = now_ns();
		cbuf_side(sh, 0, size, iters, block, 1);
	} else {
		for (long i = 0; i < warm; i++)
			xfer(a[1], b[0], buf, size, 1);
		t0 = now_ns();
		for (long i = 0; i < iters; i++)
			xfer(a[1], b[0], buf, size, 1);
	}
	uint64_t dt = now_ns() - t0;
	int st;
	waitpid(pid, &st, 0);
	if (is_cbuf) {
		struct cbuf_stats s;
		cbuf_get_stats(&s);
		printf("collects %llu\ncollect_us %.1f\n", (unsigned long long)s.collects, s.collects ? s.blocked_ns / 1e3 / s.collects : 0.0);
		cbuf_disconnect();
	}
	printf("rtt_ns %.1f\n", (double)dt / iters);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* ---- Figure 7: allocation cost with collection ---- */
#define GCRING 16384
#define PRING 4096 /* the policy ring; bench/cbuf_policy.go mirrors it */
struct gcring {
	_Atomic uint64_t head, tail;
	_Atomic uint64_t ids[GCRING];
};

static int gc(const char *sock, long iters, long pool_pages)
{
	/* one page per buffer: the whole pool may be in flight */
	uint64_t inflight = pool_pages > 0 ? (uint64_t)pool_pages : 1;
	if (inflight > GCRING)
		inflight = GCRING;
	struct gcring *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (r == MAP_FAILED)
		die("mmap");
	pid_t pid = fork();
	if (pid == 0) {
		connect_or_die(sock);
		for (long i = 0; i < iters;) {
			uint64_t t = atomic_load(&r->tail);
			if (t == atomic_load_explicit(&r->head, memory_order_acquire)) {
				sched_yield();
				continue;
			}
			uint64_t id = atomic_load(&r->ids[t % GCRING]);
			volatile char *q = cbuf2buf(id, 4096);
			if (q)
				sink += q[0];
			cbuf_free(id);
			/* tail moves only after the free: the parent's drain waits for it */
			atomic_store_explicit(&r->tail, t + 1, memory_order_release);
			i++;
		}
		cbuf_disconnect();
		_exit(0);
	}
	connect_or_die(sock);
	uint64_t t0 = now_ns(), tin = 0;
	for (long i = 0; i < iters; i++) {
		/* Untimed: once the whole pool is in flight, let the receiver free
		 * it all, so a collection finds the pool dead instead of waiting
		 * for the receiver: alloc_ns is the allocator's cost, not the
		 * pipe's. */
		if (atomic_load(&r->head) - atomic_load(&r->tail) >= inflight)
			while (atomic_load_explicit(&r->tail, memory_order_acquire) != atomic_load(&r->head))
				sched_yield();
		uint64_t t = now_ns();
		cbuf_t id;
		char *p = cbuf_alloc(4096, &id);
		tin += now_ns() - t;
		if (!p)
			die("cbuf_alloc");
		p[0] = 1;
		cbuf_send(id);
		uint64_t h = atomic_load(&r->head);
		atomic_store(&r->ids[h % GCRING], id);
		atomic_store_explicit(&r->head, h + 1, memory_order_release);
		cbuf_free(id);
	}
	uint64_t dt = now_ns() - t0;
	struct cbuf_stats s;
	cbuf_get_stats(&s);
	int st;
	waitpid(pid, &st, 0);
	printf("alloc_ns %.1f\ncollects %llu\ntotal_ns %.1f\n", (double)tin / iters, (unsigned long long)s.collects, (double)dt / iters);
	cbuf_disconnect();
	return 0;
}

/* ---- policy experiment ----
 * SHM is a file the bench maps too:
 *   u64 stop, u64 produced, u64 consumed, u64 interferer_pages (demand), u64 interferer_ops,
 *   then a ring of ids from producer to consumer. */
struct pshm {
	_Atomic uint64_t stop, produced, consumed, demand, iops;
	_Atomic uint64_t head, tail;
	_Atomic uint64_t ids[PRING];
};

static struct pshm *map_pshm(const char *path)
{
	int fd = open(path, O_RDWR);
	if (fd < 0)
		die("open shm");
	struct pshm *p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		die("mmap shm");
	return p;
}

static void spin_ns(uint64_t ns)
{
	uint64_t t = now_ns();
	while (now_ns() - t < ns)
		;
}

/* producer: a 4-page message per iteration, some work to fill it */
static int producer(const char *sock, const char *shm, size_t pages, uint64_t work_ns)
{
	struct pshm *p = map_pshm(shm);
	connect_or_die(sock);
	while (!atomic_load(&p->stop)) {
		while (atomic_load(&p->head) - atomic_load(&p->tail) >= PRING && !atomic_load(&p->stop))
			usleep(50);
		cbuf_t id;
		char *b = cbuf_alloc(pages * 4096, &id);
		if (!b)
			break;
		spin_ns(work_ns);
		b[0] = 1;
		cbuf_send(id);
		uint64_t h = atomic_load(&p->head);
		atomic_store(&p->ids[h % PRING], id);
		atomic_store_explicit(&p->head, h + 1, memory_order_release);
		cbuf_free(id);
		atomic_fetch_add(&p->produced, 1);
	}
	cbuf_disconnect();
	return 0;
}

/* consumer: takes each message at once but holds it for HOLD_US (its
 * asynchronous processing) before freeing it, so the producer's pool must
 * cover rate x hold buffers in flight: the pool size sets its blocked time */
static int consumer(const char *sock, const char *shm, size_t pages, uint64_t hold_us)
{
	struct pshm *p = map_pshm(shm);
	connect_or_die(sock);
	enum { Q = 65536 };
	static cbuf_t q[Q];
	static uint64_t ts[Q];
	uint64_t qh = 0, qt = 0;
	while (!atomic_load(&p->stop)) {
		uint64_t now = now_ns();
		while (qt != qh && now - ts[qt % Q] >= hold_us * 1000) {
			cbuf_free(q[qt % Q]);
			qt++;
		}
		uint64_t t = atomic_load(&p->tail);
		if (t == atomic_load_explicit(&p->head, memory_order_acquire) || qh - qt >= Q) {
			usleep(50);
			continue;
		}
		uint64_t id = atomic_load(&p->ids[t % PRING]);
		atomic_store(&p->tail, t + 1);
		volatile char *b = cbuf2buf(id, pages * 4096);
		if (b) {
			sink += b[0];
			q[qh % Q] = id;
			ts[qh % Q] = now;
			qh++;
		}
		atomic_fetch_add(&p->consumed, 1);
	}
	cbuf_disconnect();
	return 0;
}

/* interferer: holds `demand` pages of 1-page buffers, cycling them (free
 * one, allocate one) as fast as it can; the bench moves demand up and down */
static int interferer(const char *sock, const char *shm)
{
	struct pshm *p = map_pshm(shm);
	connect_or_die(sock);
	enum { MAXH = 16384 };
	static cbuf_t held[MAXH];
	long n = 0, k = 0;
	while (!atomic_load(&p->stop)) {
		long want = (long)atomic_load(&p->demand);
		if (want > MAXH)
			want = MAXH;
		if (n < want) {
			if (!cbuf_alloc(4096, &held[n]))
				break;
			n++;
		} else if (n > want) {
			cbuf_free(held[--n]);
		} else if (n > 0) {
			/* churn: free and reallocate one held buffer */
			long i = k++ % n;
			cbuf_free(held[i]);
			if (!cbuf_alloc(4096, &held[i]))
				break;
			atomic_fetch_add(&p->iops, 1);
		} else {
			usleep(1000);
		}
	}
	cbuf_disconnect();
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double median_u64(uint64_t *v, long n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return n ? (double)v[n / 2] : 0;
}

/* One 1-page message per iteration: the owner allocates (an exporting
 * owner maps each new buffer on its first alloc), writes, grants and
 * sends; the receiver takes it twice with cbuf2buf, reading a byte each
 * time, and frees it. Every figure is a median over ITERS messages. */
static int grant(const char *sock, const char *mode, long iters)
{
	int xuid = !strcmp(mode, "xuid"), exp = xuid || !strcmp(mode, "export");
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp))
		die("socketpair");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(sp[0]);
		if (xuid && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
			die("setuid nobody");
		connect_or_die(sock);
		uint64_t tok = cbuf_self(), id, t[2];
		if (write(sp[1], &tok, sizeof(tok)) != sizeof(tok))
			_exit(1);
		while (read(sp[1], &id, sizeof(id)) == sizeof(id)) {
			uint64_t t0 = now_ns();
			volatile const char *p = cbuf2buf(id, 4096);
			if (!p)
				_exit(2);
			sink += p[0];
			uint64_t t1 = now_ns();
			volatile const char *q = cbuf2buf(id, 4096);
			if (!q)
				_exit(3);
			sink += q[0];
			t[0] = t1 - t0;
			t[1] = now_ns() - t1;
			cbuf_free(id);
			cbuf_free(id);
			if (write(sp[1], t, sizeof(t)) != sizeof(t))
				_exit(1);
		}
		_exit(0);
	}
	close(sp[1]);
	connect_or_die(sock);
	if (exp && cbuf_export()) {
		fprintf(stderr, "cbufbench: cbuf_export failed\n");
		return 1;
	}
	uint64_t tok;
	if (read(sp[0], &tok, sizeof(tok)) != sizeof(tok))
		die("receiver's token");
	uint64_t *first = calloc(iters, 8), *again = calloc(iters, 8), *al = calloc(iters, 8), *gr = calloc(iters, 8),
		 *msg = calloc(iters, 8);
	for (long i = 0; i < iters; i++) {
		cbuf_t id;
		uint64_t t0 = now_ns();
		char *p = cbuf_alloc(4096, &id);
		if (!p) {
			fprintf(stderr, "cbufbench: cbuf_alloc failed\n");
			return 1;
		}
		p[0] = (char)i;
		uint64_t t1 = now_ns();
		/* two sends: the receiver takes it twice */
		if (exp) {
			int e = cbuf_send_to(id, tok);
			if (e) {
				errno = -e;
				die("cbuf_send_to");
			}
		} else {
			cbuf_send(id);
		}
		cbuf_send(id);
		uint64_t t2 = now_ns(), t[2];
		if (write(sp[0], &id, sizeof(id)) != sizeof(id) || read(sp[0], t, sizeof(t)) != sizeof(t))
			die("receiver");
		msg[i] = now_ns() - t0;
		cbuf_free(id);
		first[i] = t[0];
		again[i] = t[1];
		al[i] = t1 - t0;
		gr[i] = t2 - t1;
	}
	close(sp[0]);
	int st;
	waitpid(pid, &st, 0);
	printf("first_receipt_ns %.0f\nrepeat_receipt_ns %.0f\nalloc_ns %.0f\ngrant_send_ns %.0f\nmessage_ns %.0f\n",
	       median_u64(first, iters), median_u64(again, iters), median_u64(al, iters), median_u64(gr, iters), median_u64(msg, iters));
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "fast"))
		return fast(argv[2], strtoul(argv[3], 0, 0), strtol(argv[4], 0, 0));
	if (argc == 6 && !strcmp(argv[1], "rtt"))
		return rtt(argv[2], argv[3], strtoul(argv[4], 0, 0), strtol(argv[5], 0, 0));
	if (argc == 5 && !strcmp(argv[1], "gc"))
		return gc(argv[2], strtol(argv[3], 0, 0), strtol(argv[4], 0, 0));
	if (argc == 6 && !strcmp(argv[1], "producer"))
		return producer(argv[2], argv[3], strtoul(argv[4], 0, 0), strtoull(argv[5], 0, 0));
	if (argc == 6 && !strcmp(argv[1], "consumer"))
		return consumer(argv[2], argv[3], strtoul(argv[4], 0, 0), strtoull(argv[5], 0, 0));
	if (argc == 5 && !strcmp(argv[1], "grant"))
		return grant(argv[2], argv[3], atol(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "interferer"))
		return interferer(argv[2], argv[3]);
	fprintf(stderr, "usage: see bench/cbuf/peer/cbufbench.c\n");
	return 2;
}
