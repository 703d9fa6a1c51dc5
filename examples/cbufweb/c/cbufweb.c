/* cbufweb: a web server split into protection domains that pass requests and
 * responses as CBUF ids (the CBUF paper's section 5.3, on Linux processes).
 *
 *   cbufweb front   --cbuf SOCK --listen ADDR:PORT --content PATH [--cache PATH]
 *                   [--metrics ADDR:PORT] [--send writev|zerocopy|splice]
 *   cbufweb content --cbuf SOCK --listen PATH
 *   cbufweb cache   --cbuf SOCK --listen PATH --content PATH [--entries N]
 *   cbufweb run     --cbuf SOCK --listen ADDR:PORT --dir DIR [--cache]
 *                   [--metrics ADDR:PORT] [--send MODE] [--workers N]
 *
 * front: accepts HTTP/1.1 (keep-alive), parses, asks the content component
 *   (or the cache) for the body with a request CBUF, and writes the header
 *   and the body's CBUFs (read-only mappings of the content's pool) with one
 *   writev. /gen?size=N[&seed=S] is generated for every request,
 *   /cached?size=N[&seed=S] comes from the cache, /health says whether the
 *   content component is connected.
 * content: fills bodies of the requested size (pattern.h) into CBUFs of at
 *   most 256 KiB, lists them in an aggregate CBUF and replies with its id
 *   and the checksum.
 * cache: keeps the aggregates of earlier /cached bodies (and references on
 *   their CBUFs) and hands their ids out again.
 * run: starts them (fork + exec of itself; --workers N pairs of content
 *   component and front end, the fronts sharing the port), writes
 *   DIR/ROLE.pid, and restarts any that dies.
 *
 * Between components: SOCK_SEQPACKET Unix sockets carrying struct web_msg.
 * On accepting a client a server sends a hello whose id is a one-page
 * "status" CBUF where it publishes the last request sequence number it has
 * received (taken with cbuf2buf): when it dies, its client knows which of
 * its request CBUFs never arrived and receives those itself, so every send
 * is matched by a receive and the manager can collect every buffer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include <cbuf.h>

#include "pattern.h"

#define PIECE (256u * 1024u) /* largest CBUF: 64 pages */
#define MAX_BODY (4u * 1024u * 1024u)
#define MAX_PIECES (MAX_BODY / PIECE)
#define IN_MAX 16384   /* request head + body; more is a 413 */
#define MAX_CONNS 4096 /* by fd */
#define PEND 65536     /* sequence -> connection table */
#define HELD_MAX 64

#define REQ_MAGIC 0x51524257u /* "WBRQ" */
#define F_CRASH 1u            /* content: die while filling the body (tests) */

struct web_msg {
	uint64_t seq; /* 0: hello */
	uint64_t id;  /* request CBUF, reply aggregate, or hello status page */
	uint64_t sum; /* reply: checksum */
	uint32_t size;
	int32_t status; /* reply: HTTP status */
};

struct web_req {
	uint32_t magic;
	uint32_t size;
	uint64_t seed;
	uint32_t delay_ms;
	uint32_t flags;
};

struct web_status {
	uint64_t recv_seq; /* last request sequence received (cbuf2buf done) */
	uint64_t pid;
};

static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "cbufweb: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int unix_listen(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		die("socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	unlink(path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) || listen(s, 64))
		die("listen on %s: %s", path, strerror(errno));
	return s;
}

static int unix_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		close(s);
		return -1;
	}
	return s;
}

static int tcp_listen(const char *addr)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		die("want HOST:PORT, got %s", addr);
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("bad address %s", addr);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)); /* run --workers: fronts share the port */
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) || listen(s, 1024))
		die("listen on %s: %s", addr, strerror(errno));
	set_nonblock(s);
	return s;
}

static void cbuf_up(const char *sock, const char *name)
{
	setenv("CBUF_NAME", name, 0);
	for (int i = 0;; i++) {
		int err = cbuf_connect(sock);
		if (!err)
			return;
		if (i > 100)
			die("cbuf_connect %s: %s", sock, strerror(-err));
		usleep(50000);
	}
}

/* ------------------------------------------------------------------ */
/* Servers of the request protocol (content, cache): one status page per
 * client connection. */

struct peer {
	int fd;
	cbuf_t status_id;
	struct web_status *status;
};

static int peer_hello(struct peer *p, int fd)
{
	p->fd = fd;
	p->status = cbuf_alloc(sizeof(struct web_status), &p->status_id);
	if (!p->status)
		return -1;
	p->status->recv_seq = 0;
	p->status->pid = (uint64_t)getpid();
	cbuf_send(p->status_id);
	struct web_msg h = {.seq = 0, .id = p->status_id};
	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h))
		return -1;
	return 0;
}

static void peer_close(struct peer *p)
{
	if (p->status)
		cbuf_free(p->status_id);
	p->status = NULL;
	close(p->fd);
	p->fd = -1;
}

/* Receives a request CBUF and records its sequence as received. */
static int take_request(struct peer *p, const struct web_msg *m, struct web_req *out)
{
	const struct web_req *rq = cbuf2buf(m->id, sizeof(*rq));
	if (!rq)
		return -1;
	__atomic_store_n(&p->status->recv_seq, m->seq, __ATOMIC_RELEASE);
	*out = *rq;
	cbuf_free(m->id);
	return out->magic == REQ_MAGIC ? 0 : -1;
}

static void reply(int fd, uint64_t seq, cbuf_t agg, uint64_t sum, uint32_t size, int status)
{
	struct web_msg r = {.seq = seq, .id = agg, .sum = sum, .size = size, .status = status};
	send(fd, &r, sizeof(r), MSG_NOSIGNAL);
}

/* Builds a body: pieces of at most PIECE bytes listed in an aggregate.
 * Every CBUF is sent (counted) and our reference dropped: the receiver
 * takes its own. */
static cbuf_t make_body(uint32_t size, uint64_t seed, int crash, uint64_t *sum)
{
	unsigned n = (size + PIECE - 1) / PIECE;
	cbuf_t agg = cbuf_agg_alloc(n), ids[MAX_PIECES];
	if (!agg)
		return 0;
	*sum = 0;
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = size - i * PIECE < PIECE ? size - i * PIECE : PIECE;
		void *p = cbuf_alloc(len, &ids[i]);
		if (!p) { /* nothing sent yet: every buffer goes straight back */
			for (unsigned k = 0; k < i; k++)
				cbuf_free(ids[k]);
			cbuf_free(agg);
			return 0;
		}
		if (crash) { /* half a body, then die: the front answers 502 */
			web_fill(p, (size_t)i * PIECE, len / 2 & ~7u, seed);
			kill(getpid(), SIGKILL);
		}
		*sum += web_fill(p, (size_t)i * PIECE, len, seed);
		cbuf_agg_append(agg, ids[i], 0, len);
	}
	for (unsigned i = 0; i < n; i++) {
		cbuf_send(ids[i]);
		cbuf_free(ids[i]);
	}
	cbuf_send(agg);
	cbuf_free(agg);
	return agg;
}

static int content_main(const char *cbs, const char *path)
{
	cbuf_up(cbs, "cbufweb-content");
	int ls = unix_listen(path);
	struct pollfd pf[65];
	struct peer peers[64];
	int np = 0;
	uint64_t served = 0;
	while (!stop) {
		pf[0] = (struct pollfd){.fd = ls, .events = POLLIN};
		for (int i = 0; i < np; i++)
			pf[i + 1] = (struct pollfd){.fd = peers[i].fd, .events = POLLIN};
		if (poll(pf, (nfds_t)np + 1, 1000) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (pf[0].revents & POLLIN) {
			int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0 && np < 64 && peer_hello(&peers[np], fd) == 0)
				np++;
			else if (fd >= 0)
				close(fd);
		}
		for (int i = 0; i < np; i++) {
			if (!pf[i + 1].revents)
				continue;
			struct peer *p = &peers[i];
			for (;;) {
				struct web_msg m;
				ssize_t n = recv(p->fd, &m, sizeof(m), MSG_DONTWAIT);
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (n <= 0) {
					peer_close(p);
					break;
				}
				if (n != sizeof(m))
					continue;
				struct web_req rq;
				if (take_request(p, &m, &rq)) {
					reply(p->fd, m.seq, 0, 0, 0, 400);
					continue;
				}
				if (rq.delay_ms)
					usleep(rq.delay_ms * 1000u);
				if (rq.size == 0 || rq.size > MAX_BODY) {
					reply(p->fd, m.seq, 0, 0, 0, 400);
					continue;
				}
				uint64_t sum = 0;
				cbuf_t agg = make_body(rq.size, rq.seed, rq.flags & F_CRASH, &sum);
				reply(p->fd, m.seq, agg, sum, rq.size, agg ? 200 : 503);
				served++;
			}
		}
		int j = 0;
		for (int i = 0; i < np; i++)
			if (peers[i].fd >= 0)
				peers[j++] = peers[i];
		np = j;
	}
	for (int i = 0; i < np; i++)
		peer_close(&peers[i]);
	cbuf_disconnect();
	return 0;
}

/* ------------------------------------------------------------------ */
/* Clients of the request protocol (front -> content/cache, cache -> content). */

struct upstream {
	const char *path, *name;
	int fd;
	cbuf_t status_id;
	const struct web_status *status;
	uint64_t next_seq;
	uint64_t deaths, connects;
	uint64_t retry_at;
};

static int up_connect(struct upstream *u)
{
	int fd = unix_connect(u->path);
	if (fd < 0)
		return -1;
	struct web_msg h;
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	if (poll(&pf, 1, 2000) != 1 || recv(fd, &h, sizeof(h), 0) != sizeof(h) || h.seq != 0) {
		close(fd);
		return -1;
	}
	const struct web_status *st = cbuf2buf(h.id, sizeof(*st));
	if (!st) {
		close(fd);
		return -1;
	}
	set_nonblock(fd);
	u->fd = fd;
	u->status_id = h.id;
	u->status = st;
	u->connects++;
	return 0;
}

/* Sends a request CBUF; its sequence number, or 0 on failure. */
static uint64_t up_request(struct upstream *u, uint32_t size, uint64_t seed, uint32_t delay_ms, uint32_t flags,
			   cbuf_t *req_id)
{
	if (u->fd < 0)
		return 0;
	cbuf_t id;
	struct web_req *rq = cbuf_alloc(sizeof(*rq), &id);
	if (!rq)
		return 0;
	*rq = (struct web_req){.magic = REQ_MAGIC, .size = size, .seed = seed, .delay_ms = delay_ms, .flags = flags};
	uint64_t seq = ++u->next_seq;
	cbuf_send(id);
	struct web_msg m = {.seq = seq, .id = id};
	if (send(u->fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(m)) {
		/* not sent after all: take it back ourselves so it can die */
		if (cbuf2buf(id, sizeof(*rq)))
			cbuf_free(id);
		cbuf_free(id);
		return 0;
	}
	cbuf_free(id);
	*req_id = id;
	return seq;
}

/* After the upstream died: a request it never received is received here,
 * so the send is matched and the manager can collect the CBUF. */
static void up_unsent(struct upstream *u, uint64_t seq, cbuf_t req_id, uint64_t last_recv)
{
	(void)u;
	if (seq > last_recv && cbuf2buf(req_id, sizeof(struct web_req)))
		cbuf_free(req_id);
}

static uint64_t up_down(struct upstream *u)
{
	uint64_t last = __atomic_load_n(&u->status->recv_seq, __ATOMIC_ACQUIRE);
	cbuf_free(u->status_id);
	u->status = NULL;
	close(u->fd);
	u->fd = -1;
	u->deaths++;
	u->retry_at = now_ms() + 50;
	return last;
}

/* A reply's CBUFs: receive the aggregate and its pieces. Returns the number
 * of pieces (ids and pointers filled), -1 if the reply is unusable (every
 * CBUF received is freed again). */
static int take_body(const struct web_msg *m, cbuf_t *ids, const void **ptrs, uint32_t *lens)
{
	if (!m->id || !cbuf2buf(m->id, 16))
		return -1;
	int n = cbuf_agg_count(m->id);
	if (n < 0 || n > (int)MAX_PIECES) {
		cbuf_free(m->id);
		return -1;
	}
	uint64_t total = 0;
	int ok = 1;
	for (int i = 0; i < n; i++) {
		uint32_t off, len;
		if (cbuf_agg_get(m->id, i, &ids[i], &off, &len)) {
			n = i;
			ok = 0;
			break;
		}
		const char *p = cbuf2buf(ids[i], (size_t)off + len);
		if (!p) {
			n = i;
			ok = 0;
			break;
		}
		ptrs[i] = p + off;
		lens[i] = len;
		total += len;
	}
	if (!ok || total != m->size) {
		for (int i = 0; i < n; i++)
			cbuf_free(ids[i]);
		cbuf_free(m->id);
		return -1;
	}
	return n;
}

/* ------------------------------------------------------------------ */
/* Cache: /cached bodies by (size, seed), each kept as its aggregate with a
 * reference on it and on every piece. */

struct centry {
	uint32_t size;
	uint64_t seed, sum;
	cbuf_t agg, ids[MAX_PIECES];
	int n;
	uint64_t used;
};

struct waiting { /* a miss waiting for the content component */
	uint64_t seq, up_seq, seed;
	cbuf_t req_id;
	int peer;
	uint32_t size;
};

static void centry_drop(struct centry *e)
{
	for (int i = 0; i < e->n; i++)
		cbuf_free(e->ids[i]);
	if (e->agg)
		cbuf_free(e->agg);
	memset(e, 0, sizeof(*e));
}

static void centry_hand_out(struct centry *e, int fd, uint64_t seq)
{
	for (int i = 0; i < e->n; i++)
		cbuf_send(e->ids[i]);
	cbuf_send(e->agg);
	reply(fd, seq, e->agg, e->sum, e->size, 200);
}

static int cache_main(const char *cbs, const char *path, const char *content, int entries)
{
	cbuf_up(cbs, "cbufweb-cache");
	struct upstream up = {.path = content, .name = "content", .fd = -1};
	/* listen only once the content component answers: a front end that
	 * reaches the cache can then be served (it reconnects later by itself) */
	for (int i = 0; i < 200 && up_connect(&up); i++)
		usleep(50000);
	int ls = unix_listen(path);
	struct centry *tab = calloc((size_t)entries, sizeof(*tab));
	struct waiting wait[256];
	int nw = 0;
	struct peer peers[64];
	int np = 0;
	uint64_t tick = 0;
	while (!stop) {
		if (up.fd < 0 && now_ms() >= up.retry_at && up_connect(&up))
			up.retry_at = now_ms() + 50;
		struct pollfd pf[66];
		pf[0] = (struct pollfd){.fd = ls, .events = POLLIN};
		pf[1] = (struct pollfd){.fd = up.fd, .events = POLLIN};
		for (int i = 0; i < np; i++)
			pf[i + 2] = (struct pollfd){.fd = peers[i].fd, .events = POLLIN};
		if (poll(pf, (nfds_t)np + 2, up.fd < 0 ? 50 : 1000) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (pf[0].revents & POLLIN) {
			int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0 && np < 64 && peer_hello(&peers[np], fd) == 0)
				np++;
			else if (fd >= 0)
				close(fd);
		}
		if (up.fd >= 0 && pf[1].revents) {
			for (;;) {
				struct web_msg m;
				ssize_t n = recv(up.fd, &m, sizeof(m), MSG_DONTWAIT);
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (n <= 0) { /* content died: its misses get a 502 */
					uint64_t last = up_down(&up);
					for (int i = 0; i < nw; i++) {
						up_unsent(&up, wait[i].up_seq, wait[i].req_id, last);
						if (wait[i].peer >= 0)
							reply(peers[wait[i].peer].fd, wait[i].seq, 0, 0, 0, 502);
					}
					nw = 0;
					break;
				}
				int w = -1;
				for (int i = 0; i < nw; i++)
					if (wait[i].up_seq == m.seq)
						w = i;
				struct centry tmp = {0};
				int ok = m.status == 200 && (tmp.n = take_body(&m, tmp.ids, (const void *[MAX_PIECES]){0},
									   (uint32_t[MAX_PIECES]){0})) >= 0;
				if (w < 0) {
					if (ok) {
						tmp.agg = m.id;
						centry_drop(&tmp);
					}
					continue;
				}
				struct waiting wt = wait[w];
				wait[w] = wait[--nw];
				int fd = wt.peer >= 0 ? peers[wt.peer].fd : -1;
				if (!ok) {
					if (fd >= 0)
						reply(fd, wt.seq, 0, 0, 0, m.status == 200 ? 502 : m.status);
					continue;
				}
				tmp.agg = m.id;
				tmp.size = wt.size;
				tmp.seed = wt.seed;
				tmp.sum = m.sum;
				tmp.used = ++tick;
				int victim = 0;
				for (int i = 0; i < entries; i++) {
					if (!tab[i].agg) {
						victim = i;
						break;
					}
					if (tab[i].used < tab[victim].used)
						victim = i;
				}
				centry_drop(&tab[victim]);
				tab[victim] = tmp;
				if (fd >= 0)
					centry_hand_out(&tab[victim], fd, wt.seq);
			}
		}
		for (int i = 0; i < np; i++) {
			if (!pf[i + 2].revents)
				continue;
			struct peer *p = &peers[i];
			for (;;) {
				struct web_msg m;
				ssize_t n = recv(p->fd, &m, sizeof(m), MSG_DONTWAIT);
				if (n < 0 && (errno == EAGAIN || errno == EINTR))
					break;
				if (n <= 0) {
					peer_close(p);
					break;
				}
				struct web_req rq;
				if (n != sizeof(m) || take_request(p, &m, &rq)) {
					reply(p->fd, m.seq, 0, 0, 0, 400);
					continue;
				}
				struct centry *hit = NULL;
				for (int k = 0; k < entries; k++)
					if (tab[k].agg && tab[k].size == rq.size && tab[k].seed == rq.seed)
						hit = &tab[k];
				if (hit) {
					hit->used = ++tick;
					centry_hand_out(hit, p->fd, m.seq);
					continue;
				}
				cbuf_t rid;
				uint64_t us = nw < 256 ? up_request(&up, rq.size, rq.seed, rq.delay_ms, rq.flags, &rid) : 0;
				if (!us) {
					reply(p->fd, m.seq, 0, 0, 0, 502);
					continue;
				}
				wait[nw++] = (struct waiting){.seq = m.seq, .up_seq = us, .seed = rq.seed, .req_id = rid, .peer = i, .size = rq.size};
			}
		}
		/* compact peers, keeping the waiting list's indexes right (a miss
		 * whose front went away is dropped when its answer comes) */
		int j = 0, map[64];
		for (int i = 0; i < np; i++) {
			map[i] = peers[i].fd >= 0 ? j : -1;
			if (peers[i].fd >= 0)
				peers[j++] = peers[i];
		}
		for (int i = 0; i < nw; i++)
			wait[i].peer = wait[i].peer >= 0 ? map[wait[i].peer] : -1;
		np = j;
	}
	for (int i = 0; i < entries; i++)
		centry_drop(&tab[i]);
	for (int i = 0; i < np; i++)
		peer_close(&peers[i]);
	cbuf_disconnect();
	return 0;
}

/* ------------------------------------------------------------------ */
/* Front end. */

enum { S_READ, S_WAIT, S_WRITE };
enum { SEND_WRITEV, SEND_ZEROCOPY, SEND_SPLICE };

struct conn {
	int fd, state, keep, head;
	int readable;
	char *in;
	size_t inlen, consume;
	uint64_t seq;
	cbuf_t req_id;
	struct upstream *up;
	char hdr[256];
	struct iovec iov[1 + MAX_PIECES];
	int niov, iovpos;
	cbuf_t agg, ids[MAX_PIECES];
	int nids;
	/* held bodies whose bytes the kernel may still reference (zerocopy, splice) */
	uint32_t zc_sent, zc_done;
	struct held {
		uint32_t upto;
		cbuf_t agg, ids[MAX_PIECES];
		int nids;
	} held[HELD_MAX];
	int nheld;
	int hold_this; /* this response goes out by zerocopy/splice and is held */
	int pipe[2];
};

static struct conn *conns[MAX_CONNS];
static int pend[PEND]; /* seq % PEND -> fd */
static int send_mode = SEND_WRITEV;

static struct {
	uint64_t accepted, closed, requests, bytes;
	uint64_t st200, st400, st404, st405, st413, st501, st502, st503;
	uint64_t bad_replies, zc_copied, zc_notes;
} M;

static void count_status(int st)
{
	switch (st) {
	case 200: M.st200++; break;
	case 400: M.st400++; break;
	case 404: M.st404++; break;
	case 405: M.st405++; break;
	case 413: M.st413++; break;
	case 501: M.st501++; break;
	case 502: M.st502++; break;
	default: M.st503++; break;
	}
}

static const char *reason(int st)
{
	switch (st) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Content Too Large";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	default: return "Service Unavailable";
	}
}

static void release_body(cbuf_t agg, cbuf_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		cbuf_free(ids[i]);
	if (agg)
		cbuf_free(agg);
}

static void conn_close(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->state == S_WRITE || c->nids)
		release_body(c->agg, c->ids, c->nids);
	for (int i = 0; i < c->nheld; i++) /* the kernel drops its references at close */
		release_body(c->held[i].agg, c->held[i].ids, c->held[i].nids);
	if (c->pipe[0] >= 0) {
		close(c->pipe[0]);
		close(c->pipe[1]);
	}
	close(c->fd);
	conns[c->fd] = NULL;
	free(c->in);
	free(c);
	M.closed++;
}

static int conn_write(int ep, struct conn *c);
static void conn_parse(int ep, struct conn *c);
static void zc_reap(struct conn *c);
static void zc_errqueue(struct conn *c);

/* A response without body (errors, health). */
static void respond_simple(int ep, struct conn *c, int st, const char *body, int close_after)
{
	if (close_after)
		c->keep = 0;
	size_t bl = strlen(body);
	int n = snprintf(c->hdr, sizeof(c->hdr),
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n%s", st, reason(st),
			 c->head ? 0 : bl, c->keep ? "" : "Connection: close\r\n", c->head ? "" : body);
	c->iov[0] = (struct iovec){c->hdr, (size_t)n};
	c->niov = 1;
	c->iovpos = 0;
	c->nids = 0;
	c->agg = 0;
	c->state = S_WRITE;
	count_status(st);
	conn_write(ep, c);
}

static void respond_body(int ep, struct conn *c, const struct web_msg *m, const void **ptrs, const uint32_t *lens)
{
	int n = snprintf(c->hdr, sizeof(c->hdr),
			 "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %u\r\n"
			 "X-Checksum: %016llx\r\n%s\r\n",
			 m->size, (unsigned long long)m->sum, c->keep ? "" : "Connection: close\r\n");
	c->iov[0] = (struct iovec){c->hdr, (size_t)n};
	c->niov = 1;
	if (!c->head)
		for (int i = 0; i < c->nids; i++)
			c->iov[c->niov++] = (struct iovec){(void *)ptrs[i], lens[i]};
	c->iovpos = 0;
	c->state = S_WRITE;
	/* zerocopy and splice leave the body's pages referenced by the kernel
	 * after the call: the CBUFs are held until it lets go; with too many
	 * held already this body is copied (writev) instead of waiting */
	if (send_mode != SEND_WRITEV) {
		if (send_mode == SEND_ZEROCOPY)
			zc_errqueue(c);
		else
			zc_reap(c);
	}
	c->hold_this = send_mode != SEND_WRITEV && c->nheld < HELD_MAX;
	M.st200++;
	M.bytes += c->head ? 0 : m->size;
	conn_write(ep, c);
}

/* Releases held bodies the kernel no longer references. */
static void zc_reap(struct conn *c)
{
	int j = 0;
	for (int i = 0; i < c->nheld; i++) {
		int done;
		if (send_mode == SEND_ZEROCOPY)
			done = (int32_t)(c->zc_done - c->held[i].upto) >= 0;
		else { /* splice: once the peer has everything we queued */
			int q = 0;
			done = ioctl(c->fd, SIOCOUTQ, &q) == 0 && q == 0;
		}
		if (done)
			release_body(c->held[i].agg, c->held[i].ids, c->held[i].nids);
		else
			c->held[j++] = c->held[i];
	}
	c->nheld = j;
}

static void zc_errqueue(struct conn *c)
{
	for (;;) {
		char ctl[128];
		struct msghdr mh = {.msg_control = ctl, .msg_controllen = sizeof(ctl)};
		if (recvmsg(c->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			break;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			struct sock_extended_err *e = (void *)CMSG_DATA(cm);
			if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			c->zc_done = e->ee_data + 1; /* notes [ee_info, ee_data] done */
			M.zc_notes++;
			if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
				M.zc_copied++;
		}
	}
	zc_reap(c);
}

/* One write attempt of the iovec; splice mode moves the body pages through
 * a pipe (vmsplice + splice). */
static ssize_t do_send(struct conn *c, struct iovec *iov, int n)
{
	if (!c->hold_this || n == 0)
		return writev(c->fd, iov, n);
	if (send_mode == SEND_ZEROCOPY) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t r = sendmsg(c->fd, &mh, MSG_ZEROCOPY | MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r >= 0)
			c->zc_sent++;
		return r;
	}
	if (c->pipe[0] < 0) {
		if (pipe2(c->pipe, O_NONBLOCK | O_CLOEXEC))
			return -1;
		fcntl(c->pipe[1], F_SETPIPE_SZ, 1 << 20);
	}
	/* whatever an earlier call left in the pipe never reached the socket
	 * (the iovec was advanced only by what did): drop it */
	int left = 0;
	if (ioctl(c->pipe[0], FIONREAD, &left) == 0 && left > 0) {
		char sink[65536];
		while (read(c->pipe[0], sink, sizeof(sink)) > 0)
			;
	}
	/* non-blocking: a body larger than the pipe goes in parts (a blocking
	 * vmsplice would wait for room only this thread can make) */
	ssize_t in = vmsplice(c->pipe[1], iov, (unsigned long)n, SPLICE_F_NONBLOCK);
	if (in <= 0)
		return in;
	ssize_t out = 0;
	while (out < in) {
		ssize_t r = splice(c->pipe[0], NULL, c->fd, NULL, (size_t)(in - out), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (r <= 0) {
			if (out == 0 && r < 0 && errno == EAGAIN) { /* nothing went: drain the pipe back */
				char sink[65536];
				while (read(c->pipe[0], sink, sizeof(sink)) > 0)
					;
				errno = EAGAIN;
				return -1;
			}
			if (r < 0 && errno == EAGAIN) {
				/* partly sent: the rest of the pipe is dropped and resent from the iovec */
				char sink[65536];
				while (read(c->pipe[0], sink, sizeof(sink)) > 0)
					;
			}
			break;
		}
		out += r;
	}
	return out;
}

static void after_response(int ep, struct conn *c)
{
	if (c->nids || c->agg) {
		if (c->hold_this) {
			struct held *h = &c->held[c->nheld++];
			h->upto = c->zc_sent;
			h->agg = c->agg;
			h->nids = c->nids;
			memcpy(h->ids, c->ids, sizeof(cbuf_t) * (size_t)c->nids);
			zc_reap(c);
		} else
			release_body(c->agg, c->ids, c->nids);
	}
	c->agg = 0;
	c->nids = 0;
	c->hold_this = 0;
	c->state = S_READ;
	if (!c->keep) {
		conn_close(ep, c);
		return;
	}
	memmove(c->in, c->in + c->consume, c->inlen - c->consume);
	c->inlen -= c->consume;
	c->consume = 0;
	conn_parse(ep, c);
}

/* Returns -1 if the connection was closed. */
static int conn_write(int ep, struct conn *c)
{
	while (c->iovpos < c->niov) {
		ssize_t n = do_send(c, c->iov + c->iovpos, c->niov - c->iovpos);
		if (n < 0) {
			if (errno == EAGAIN || errno == ENOBUFS)
				return 0; /* EPOLLOUT continues */
			conn_close(ep, c);
			return -1;
		}
		while (n > 0 && c->iovpos < c->niov) {
			struct iovec *v = &c->iov[c->iovpos];
			if ((size_t)n >= v->iov_len) {
				n -= (ssize_t)v->iov_len;
				c->iovpos++;
			} else {
				v->iov_base = (char *)v->iov_base + n;
				v->iov_len -= (size_t)n;
				n = 0;
			}
		}
	}
	after_response(ep, c);
	return 0;
}

static struct upstream UP_CONTENT = {.name = "content", .fd = -1}, UP_CACHE = {.name = "cache", .fd = -1};

static int ieq(const char *a, size_t al, const char *b)
{
	return al == strlen(b) && strncasecmp(a, b, al) == 0;
}

static int tchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Parses one request at the start of c->in: 0 = need more, >0 = handled,
 * <0 = an error status to answer (and close). */
static int parse_one(int ep, struct conn *c)
{
	char *b = c->in, *end = NULL;
	for (size_t i = 3; i < c->inlen; i++)
		if (b[i] == '\n' && b[i - 1] == '\r' && b[i - 2] == '\n' && b[i - 3] == '\r') {
			end = b + i + 1;
			break;
		}
	if (!end)
		return c->inlen >= IN_MAX ? -413 : 0;
	/* request line */
	char *p = b, *lineend = memchr(b, '\r', (size_t)(end - b));
	if (!lineend || lineend[1] != '\n')
		return -400;
	char *meth = p;
	while (p < lineend && *p >= 'A' && *p <= 'Z')
		p++;
	size_t ml = (size_t)(p - meth);
	if (!ml || *p != ' ')
		return -400;
	char *target = ++p;
	while (p < lineend && *p != ' ' && (unsigned char)*p > 0x20 && *p != 0x7f)
		p++;
	size_t tl = (size_t)(p - target);
	if (!tl || *target != '/' || *p != ' ')
		return -400;
	p++;
	int http10;
	if (lineend - p == 8 && !memcmp(p, "HTTP/1.1", 8))
		http10 = 0;
	else if (lineend - p == 8 && !memcmp(p, "HTTP/1.0", 8))
		http10 = 1;
	else
		return -400;
	/* headers */
	long long clen = 0;
	int conn_close_hdr = 0, conn_keep = 0, chunked = 0, host = 0;
	for (p = lineend + 2; p < end - 2;) {
		char *le = memchr(p, '\r', (size_t)(end - p));
		if (!le || le[1] != '\n')
			return -400;
		char *colon = p;
		while (colon < le && tchar(*colon))
			colon++;
		if (colon == p || colon >= le || *colon != ':')
			return -400;
		size_t nl = (size_t)(colon - p);
		char *v = colon + 1;
		while (v < le && (*v == ' ' || *v == '\t'))
			v++;
		size_t vl = (size_t)(le - v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			vl--;
		for (size_t k = 0; k < vl; k++)
			if ((unsigned char)v[k] < 0x20 && v[k] != '\t')
				return -400;
		if (ieq(p, nl, "content-length")) {
			if (!vl)
				return -400;
			clen = 0;
			for (size_t k = 0; k < vl; k++) {
				if (v[k] < '0' || v[k] > '9')
					return -400;
				clen = clen * 10 + (v[k] - '0');
				if (clen > (1ll << 40))
					return -413;
			}
		} else if (ieq(p, nl, "transfer-encoding"))
			chunked = 1;
		else if (ieq(p, nl, "host"))
			host = 1;
		else if (ieq(p, nl, "connection")) {
			if (memmem(v, vl, "close", 5) || memmem(v, vl, "Close", 5))
				conn_close_hdr = 1;
			if (memmem(v, vl, "keep-alive", 10) || memmem(v, vl, "Keep-Alive", 10))
				conn_keep = 1;
		}
		p = le + 2;
	}
	if (!http10 && !host)
		return -400; /* RFC 9112: a 1.1 request without Host is a 400 */
	if (chunked)
		return -501;
	size_t headlen = (size_t)(end - b);
	if (clen > (long long)(IN_MAX - headlen))
		return -413;
	if (c->inlen < headlen + (size_t)clen)
		return 0; /* body still coming */
	c->consume = headlen + (size_t)clen;
	c->keep = http10 ? conn_keep && !conn_close_hdr : !conn_close_hdr;
	c->head = ml == 4 && !memcmp(meth, "HEAD", 4);
	M.requests++;
	if (!(ml == 3 && !memcmp(meth, "GET", 3)) && !c->head) {
		respond_simple(ep, c, 405, "method not allowed\n", 0);
		return 1;
	}
	char *q = memchr(target, '?', tl);
	size_t pl = q ? (size_t)(q - target) : tl, ql = q ? tl - pl - 1 : 0;
	if (ieq(target, pl, "/health")) {
		if (UP_CONTENT.fd >= 0 && (!UP_CACHE.path || UP_CACHE.fd >= 0))
			respond_simple(ep, c, 200, "ok\n", 0);
		else
			respond_simple(ep, c, 503, "content or cache component down\n", 0);
		return 1;
	}
	struct upstream *up = NULL;
	if (ieq(target, pl, "/gen"))
		up = &UP_CONTENT;
	else if (ieq(target, pl, "/cached") && UP_CACHE.path)
		up = &UP_CACHE;
	if (!up) {
		respond_simple(ep, c, 404, "not found\n", 0);
		return 1;
	}
	long long size = web_query_num(q ? q + 1 : "", ql, "size");
	long long seed = web_query_num(q ? q + 1 : "", ql, "seed");
	long long delay = web_query_num(q ? q + 1 : "", ql, "delay_ms");
	long long crash = web_query_num(q ? q + 1 : "", ql, "crash");
	if (size <= 0 || size > MAX_BODY || delay > 10000) {
		respond_simple(ep, c, 400, "size must be 1..4194304\n", 0);
		return 1;
	}
	uint64_t seq = up_request(up, (uint32_t)size, seed < 0 ? 0 : (uint64_t)seed, delay < 0 ? 0 : (uint32_t)delay,
				  crash > 0 ? F_CRASH : 0, &c->req_id);
	if (!seq) {
		respond_simple(ep, c, 502, "upstream component unavailable\n", 0);
		return 1;
	}
	c->seq = seq;
	c->up = up;
	c->state = S_WAIT;
	pend[(seq ^ (up == &UP_CACHE ? PEND / 2 : 0)) % PEND] = c->fd;
	return 1;
}

static void conn_parse(int ep, struct conn *c)
{
	if (c->state != S_READ)
		return;
	if (c->inlen == 0 && !c->readable)
		return;
	for (;;) {
		if (c->readable && c->inlen < IN_MAX) {
			ssize_t n = read(c->fd, c->in + c->inlen, IN_MAX - c->inlen);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				conn_close(ep, c);
				return;
			}
			if (n < 0)
				c->readable = 0;
			else
				c->inlen += (size_t)n;
		}
		if (!c->inlen)
			return;
		int r = parse_one(ep, c);
		if (r < 0) {
			M.requests++;
			c->head = 0;
			respond_simple(ep, c, -r, -r == 413 ? "request too large\n" : "bad request\n", 1);
			return;
		}
		if (r > 0 || !c->readable)
			return; /* handled (the response continues the loop) or wait for more */
	}
}

static struct conn *find_pending(struct upstream *u, uint64_t seq)
{
	int fd = pend[(seq ^ (u == &UP_CACHE ? PEND / 2 : 0)) % PEND];
	struct conn *c = fd >= 0 && fd < MAX_CONNS ? conns[fd] : NULL;
	return c && c->state == S_WAIT && c->up == u && c->seq == seq ? c : NULL;
}

static void upstream_readable(int ep, struct upstream *u)
{
	for (;;) {
		struct web_msg m;
		ssize_t n = recv(u->fd, &m, sizeof(m), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			/* died: every request still waiting on it gets a 502 */
			epoll_ctl(ep, EPOLL_CTL_DEL, u->fd, NULL);
			uint64_t last = up_down(u);
			for (int fd = 0; fd < MAX_CONNS; fd++) {
				struct conn *c = conns[fd];
				if (c && c->state == S_WAIT && c->up == u) {
					up_unsent(u, c->seq, c->req_id, last);
					respond_simple(ep, c, 502, "upstream component died\n", 0);
				}
			}
			return;
		}
		if (n != sizeof(m))
			continue;
		cbuf_t ids[MAX_PIECES];
		const void *ptrs[MAX_PIECES];
		uint32_t lens[MAX_PIECES];
		int np = m.status == 200 ? take_body(&m, ids, ptrs, lens) : -1;
		if (m.status == 200 && np < 0)
			M.bad_replies++;
		struct conn *c = find_pending(u, m.seq);
		if (!c) {
			if (np >= 0)
				release_body(m.id, ids, np);
			continue;
		}
		if (np < 0) {
			respond_simple(ep, c, m.status == 200 ? 502 : m.status, "upstream error\n", 0);
			continue;
		}
		c->agg = m.id;
		c->nids = np;
		memcpy(c->ids, ids, sizeof(cbuf_t) * (size_t)np);
		respond_body(ep, c, &m, ptrs, lens);
	}
}

static void serve_metrics(int ms)
{
	int fd = accept4(ms, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	struct timeval tv = {.tv_sec = 1};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char req[2048];
	if (read(fd, req, sizeof(req)) <= 0) {
		close(fd);
		return;
	}
	struct cbuf_stats cs;
	cbuf_get_stats(&cs);
	uint64_t open = M.accepted - M.closed;
	char body[4096];
	int n = snprintf(body, sizeof(body),
			 "# TYPE cbufweb_requests_total counter\ncbufweb_requests_total %llu\n"
			 "# TYPE cbufweb_responses_total counter\n"
			 "cbufweb_responses_total{code=\"200\"} %llu\ncbufweb_responses_total{code=\"400\"} %llu\n"
			 "cbufweb_responses_total{code=\"404\"} %llu\ncbufweb_responses_total{code=\"405\"} %llu\n"
			 "cbufweb_responses_total{code=\"413\"} %llu\ncbufweb_responses_total{code=\"501\"} %llu\n"
			 "cbufweb_responses_total{code=\"502\"} %llu\ncbufweb_responses_total{code=\"503\"} %llu\n"
			 "# TYPE cbufweb_body_bytes_total counter\ncbufweb_body_bytes_total %llu\n"
			 "# TYPE cbufweb_connections_accepted_total counter\ncbufweb_connections_accepted_total %llu\n"
			 "# TYPE cbufweb_connections_open gauge\ncbufweb_connections_open %llu\n"
			 "# TYPE cbufweb_upstream_deaths_total counter\n"
			 "cbufweb_upstream_deaths_total{component=\"content\"} %llu\n"
			 "cbufweb_upstream_deaths_total{component=\"cache\"} %llu\n"
			 "# TYPE cbufweb_upstream_connects_total counter\n"
			 "cbufweb_upstream_connects_total{component=\"content\"} %llu\n"
			 "cbufweb_upstream_connects_total{component=\"cache\"} %llu\n"
			 "# TYPE cbufweb_bad_replies_total counter\ncbufweb_bad_replies_total %llu\n"
			 "# TYPE cbufweb_zerocopy_notes_total counter\ncbufweb_zerocopy_notes_total %llu\n"
			 "# TYPE cbufweb_zerocopy_copied_total counter\ncbufweb_zerocopy_copied_total %llu\n"
			 "# TYPE cbufweb_cbuf_ops_total counter\n"
			 "cbufweb_cbuf_ops_total{op=\"alloc\"} %llu\ncbufweb_cbuf_ops_total{op=\"free\"} %llu\n"
			 "cbufweb_cbuf_ops_total{op=\"send\"} %llu\ncbufweb_cbuf_ops_total{op=\"recv\"} %llu\n"
			 "cbufweb_cbuf_ops_total{op=\"collect\"} %llu\n",
			 (unsigned long long)M.requests, (unsigned long long)M.st200, (unsigned long long)M.st400,
			 (unsigned long long)M.st404, (unsigned long long)M.st405, (unsigned long long)M.st413,
			 (unsigned long long)M.st501, (unsigned long long)M.st502, (unsigned long long)M.st503,
			 (unsigned long long)M.bytes, (unsigned long long)M.accepted, (unsigned long long)open,
			 (unsigned long long)UP_CONTENT.deaths, (unsigned long long)UP_CACHE.deaths,
			 (unsigned long long)UP_CONTENT.connects, (unsigned long long)UP_CACHE.connects,
			 (unsigned long long)M.bad_replies, (unsigned long long)M.zc_notes,
			 (unsigned long long)M.zc_copied, (unsigned long long)cs.allocs, (unsigned long long)cs.frees,
			 (unsigned long long)cs.sends, (unsigned long long)cs.recvs, (unsigned long long)cs.collects);
	char head[256];
	int hn = snprintf(head, sizeof(head),
			  "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n"
			  "Connection: close\r\n\r\n",
			  n);
	struct iovec iov[2] = {{head, (size_t)hn}, {body, (size_t)n}};
	if (writev(fd, iov, 2) < 0) {
	}
	close(fd);
}

enum { K_LISTEN = 1, K_METRICS, K_UP, K_CONN };
#define TAG(k, fd) (((uint64_t)(k) << 32) | (uint32_t)(fd))

static void up_try(int ep, struct upstream *u)
{
	if (!u->path || u->fd >= 0 || now_ms() < u->retry_at)
		return;
	if (up_connect(u)) {
		u->retry_at = now_ms() + 50;
		return;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG(K_UP, u == &UP_CACHE)};
	epoll_ctl(ep, EPOLL_CTL_ADD, u->fd, &ev);
}

static int front_main(const char *cbs, const char *listen_addr, const char *content, const char *cache,
		      const char *metrics)
{
	cbuf_up(cbs, "cbufweb-front");
	memset(pend, 0xff, sizeof(pend));
	UP_CONTENT.path = content;
	UP_CACHE.path = cache;
	int ls = tcp_listen(listen_addr);
	int ms = metrics ? tcp_listen(metrics) : -1;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG(K_LISTEN, ls)};
	epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
	if (ms >= 0) {
		ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = TAG(K_METRICS, ms)};
		epoll_ctl(ep, EPOLL_CTL_ADD, ms, &ev);
	}
	struct epoll_event evs[256];
	while (!stop) {
		up_try(ep, &UP_CONTENT);
		up_try(ep, &UP_CACHE);
		int down = (UP_CONTENT.fd < 0) || (UP_CACHE.path && UP_CACHE.fd < 0);
		int n = epoll_wait(ep, evs, 256, down ? 50 : 1000);
		for (int i = 0; i < n; i++) {
			uint32_t k = (uint32_t)(evs[i].data.u64 >> 32), fd = (uint32_t)evs[i].data.u64;
			if (k == K_LISTEN) {
				for (;;) {
					int cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (cfd < 0)
						break;
					if (cfd >= MAX_CONNS) {
						close(cfd);
						continue;
					}
					int one = 1;
					setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					if (send_mode == SEND_ZEROCOPY)
						setsockopt(cfd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one));
					struct conn *c = calloc(1, sizeof(*c));
					c->fd = cfd;
					c->in = malloc(IN_MAX);
					c->pipe[0] = c->pipe[1] = -1;
					conns[cfd] = c;
					M.accepted++;
					struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
								 .data.u64 = TAG(K_CONN, cfd)};
					epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ce);
				}
			} else if (k == K_METRICS) {
				serve_metrics(ms);
			} else if (k == K_UP) {
				struct upstream *u = fd ? &UP_CACHE : &UP_CONTENT;
				if (u->fd >= 0)
					upstream_readable(ep, u);
			} else if (k == K_CONN) {
				struct conn *c = conns[fd];
				if (!c)
					continue;
				if (evs[i].events & EPOLLERR && send_mode == SEND_ZEROCOPY)
					zc_errqueue(c);
				if (c->nheld && send_mode == SEND_SPLICE)
					zc_reap(c);
				if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
					c->readable = 1;
				if (c->state == S_WRITE && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
					if (conn_write(ep, c) < 0)
						continue;
				}
				if ((c = conns[fd]) && c->state == S_READ)
					conn_parse(ep, c);
			}
		}
	}
	for (int fd = 0; fd < MAX_CONNS; fd++)
		if (conns[fd])
			conn_close(ep, conns[fd]);
	cbuf_disconnect();
	return 0;
}

/* ------------------------------------------------------------------ */
/* Supervisor. */

struct child {
	const char *role;
	char *argv[24];
	pid_t pid;
	uint64_t restart_at;
	int starts;
};

static void write_pid(const char *dir, const char *role, pid_t pid)
{
	char p[512], tmp[520];
	snprintf(p, sizeof(p), "%s/%s.pid", dir, role);
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%d\n", (int)pid);
	fclose(f);
	rename(tmp, p);
}

static pid_t spawn(struct child *ch, const char *dir)
{
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		execv("/proc/self/exe", ch->argv);
		_exit(127);
	}
	if (pid > 0) {
		ch->pid = pid;
		ch->starts++;
		write_pid(dir, ch->role, pid);
	}
	return pid;
}

#define MAX_WORKERS 8

/* workers pairs of (content, front): front i talks to content i; the
 * fronts share the listening port (SO_REUSEPORT). Roles and pid files:
 * content, front (pair 0), content-1, front-1, ..., cache. The cache and
 * --metrics belong to pair 0. */
static int run_main(const char *cbs, const char *listen_addr, const char *dir, int cache, const char *metrics,
		    const char *mode, int workers)
{
	static char content_sock[MAX_WORKERS][512], cache_sock[512], roles[2 * MAX_WORKERS][32];
	static struct child ch[2 * MAX_WORKERS + 1];
	int n = 0;
	snprintf(cache_sock, sizeof(cache_sock), "%s/cache.sock", dir);
	for (int w = 0; w < workers; w++) {
		if (w == 0) {
			snprintf(content_sock[w], sizeof(content_sock[w]), "%s/content.sock", dir);
			strcpy(roles[2 * w], "content");
			strcpy(roles[2 * w + 1], "front");
		} else {
			snprintf(content_sock[w], sizeof(content_sock[w]), "%s/content-%d.sock", dir, w);
			snprintf(roles[2 * w], sizeof(roles[0]), "content-%d", w);
			snprintf(roles[2 * w + 1], sizeof(roles[0]), "front-%d", w);
		}
		ch[n++] = (struct child){.role = roles[2 * w],
					 .argv = {"cbufweb", "content", "--cbuf", (char *)cbs, "--listen", content_sock[w], NULL}};
		struct child *f = &ch[n++];
		*f = (struct child){.role = roles[2 * w + 1],
				    .argv = {"cbufweb", "front", "--cbuf", (char *)cbs, "--listen", (char *)listen_addr,
					     "--content", content_sock[w], "--send", (char *)mode, NULL}};
		int a = 10;
		if (w == 0 && cache) {
			f->argv[a++] = "--cache";
			f->argv[a++] = cache_sock;
		}
		if (w == 0 && metrics) {
			f->argv[a++] = "--metrics";
			f->argv[a++] = (char *)metrics;
		}
		f->argv[a] = NULL;
	}
	if (cache)
		ch[n++] = (struct child){.role = "cache",
					 .argv = {"cbufweb", "cache", "--cbuf", (char *)cbs, "--listen", cache_sock, "--content",
						  content_sock[0], NULL}};
	write_pid(dir, "run", getpid());
	for (int i = 0; i < n; i++)
		spawn(&ch[i], dir);
	while (!stop) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p > 0) {
			for (int i = 0; i < n; i++)
				if (ch[i].pid == p) {
					fprintf(stderr, "cbufweb: %s (pid %d) %s %d; restarting\n", ch[i].role, (int)p,
						WIFSIGNALED(st) ? "killed by signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
					ch[i].pid = 0;
					ch[i].restart_at = now_ms() + 100;
				}
			continue;
		}
		for (int i = 0; i < n; i++)
			if (!ch[i].pid && now_ms() >= ch[i].restart_at)
				spawn(&ch[i], dir);
		usleep(20000);
	}
	for (int i = 0; i < n; i++)
		if (ch[i].pid > 0)
			kill(ch[i].pid, SIGTERM);
	for (int i = 0; i < n; i++)
		if (ch[i].pid > 0)
			waitpid(ch[i].pid, NULL, 0);
	return 0;
}

/* ------------------------------------------------------------------ */

static const char *opt(int argc, char **argv, const char *name)
{
	for (int i = 2; i < argc - 1; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return NULL;
}

static int flag(int argc, char **argv, const char *name)
{
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cbufweb front|content|cache|run [options] (see the comment at the top of cbufweb.c)\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	const char *cbs = opt(argc, argv, "--cbuf"), *listen_addr = opt(argc, argv, "--listen");
	const char *mode = opt(argc, argv, "--send");
	if (!cbs || !listen_addr)
		die("--cbuf and --listen are required");
	if (!mode || !strcmp(mode, "writev"))
		send_mode = SEND_WRITEV, mode = "writev";
	else if (!strcmp(mode, "zerocopy"))
		send_mode = SEND_ZEROCOPY;
	else if (!strcmp(mode, "splice"))
		send_mode = SEND_SPLICE;
	else
		die("--send %s: want writev, zerocopy or splice", mode);
	const char *role = argv[1];
	if (!strcmp(role, "content"))
		return content_main(cbs, listen_addr);
	if (!strcmp(role, "cache")) {
		const char *content = opt(argc, argv, "--content"), *ents = opt(argc, argv, "--entries");
		if (!content)
			die("cache: --content is required");
		return cache_main(cbs, listen_addr, content, ents ? atoi(ents) : 64);
	}
	if (!strcmp(role, "front")) {
		const char *content = opt(argc, argv, "--content");
		if (!content)
			die("front: --content is required");
		return front_main(cbs, listen_addr, content, opt(argc, argv, "--cache"), opt(argc, argv, "--metrics"));
	}
	if (!strcmp(role, "run")) {
		const char *dir = opt(argc, argv, "--dir");
		if (!dir)
			die("run: --dir is required");
		const char *w = opt(argc, argv, "--workers");
		int workers = w ? atoi(w) : 1;
		if (workers < 1 || workers > MAX_WORKERS)
			die("run: --workers must be 1..%d", MAX_WORKERS);
		return run_main(cbs, listen_addr, dir, flag(argc, argv, "--cache"), opt(argc, argv, "--metrics"), mode,
				workers);
	}
	die("unknown role %s", role);
	return 2;
}
