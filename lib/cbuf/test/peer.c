/* Test peer for cbuf's Go tests: a C component driven from the command line.
 *   peer SOCK send N SIZE     alloc N buffers, fill them, cbuf_send, print
 *                             "id nonce" per line, free them, wait for EOF
 *                             on stdin, exit
 *   peer SOCK recv SIZE       read "id nonce" lines, cbuf2buf, check the
 *                             fill, free; print "ok N bad M"
 *   peer SOCK write ID SIZE   cbuf2buf a received id and write to it (the
 *                             write must fault: exit by SIGSEGV)
 *   peer SOCK big ID SIZE     cbuf2buf with SIZE; print "null" or "mapped"
 *   peer SOCK agg             build an aggregate (header prepended to a
 *                             payload slice), send all three, print the
 *                             aggregate's id, wait for EOF on stdin
 *   peer SOCK threads N ITERS N threads allocate, fill, check and free
 *                             concurrently (the lock-free free lists);
 *                             print "ok N bad M"
 *   peer SOCK fork            connect, send a buffer, fork; the child
 *                             connects itself and reads it: "child ok"
 *   peer SOCK krecv N [MS]    receive N buffers from the kernel component,
 *                             waiting up to MS (2000) for each, print
 *                             "kernel ok K" (K readable exec records)
 *   peer SOCK layout          print the shared layout's offsets and sizes
 *   peer SOCK secret TEXT     alloc 4 KiB, write TEXT, never send it; print
 *                             the id, wait for EOF on stdin
 *   peer SOCK sendx N SIZE    cbuf_export, then as send but with
 *                             cbuf_send_to(id, $CBUF_PEER) (a token)
 *   peer SOCK recvx SIZE      print "token T" (cbuf_self), then as recv
 *   peer SOCK tcache N        alloc N one-page buffers, free them (into
 *                             this thread's cache), print "cached N"; then
 *                             per stdin line one alloc+free ("poked"); at
 *                             EOF exit without disconnecting
 *   peer SOCK handoff N ITERS N threads pass buffers to each other through
 *                             shared slots: each allocates and fills one,
 *                             swaps it into a random slot and checks and
 *                             frees what it took out (so threads free
 *                             buffers others allocated); after they exit
 *                             print "ok N bad M", wait for EOF on stdin
 * Fill: 64-bit word i of a buffer holds nonce ^ i. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cbuf.h"
#include "cbuf_layout.h"

static void fill(uint64_t *p, size_t size, uint64_t nonce)
{
	for (size_t i = 0; i < size / 8; i++)
		p[i] = nonce ^ i;
}

static int check(const uint64_t *p, size_t size, uint64_t nonce)
{
	for (size_t i = 0; i < size / 8; i++)
		if (p[i] != (nonce ^ i))
			return 0;
	return 1;
}

static long t_iters;
static _Atomic long t_ok, t_bad;

static void *worker(void *arg)
{
	uint64_t me = (uint64_t)(uintptr_t)arg, x = me * 0x9e3779b97f4a7c15ull + 1;
	enum { H = 8 };
	cbuf_t ids[H];
	uint64_t *ps[H], nonces[H];
	size_t sizes[H];
	int n = 0;
	for (long i = 0; i < t_iters; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if (n < H && (x & 1)) {
			size_t size = 4096u << (x >> 8) % 3;
			uint64_t *p = cbuf_alloc(size, &ids[n]);
			if (!p) {
				t_bad++;
				continue;
			}
			nonces[n] = x ^ (me << 56);
			sizes[n] = 64; /* fill the first 64 bytes and the last page's start */
			fill(p, 64, nonces[n]);
			fill(p + size / 8 - 512, 64, nonces[n]);
			ps[n] = p;
			(void)sizes;
			n++;
		} else if (n > 0) {
			n--;
			size_t size = cbuf_size(ids[n]);
			if (check(ps[n], 64, nonces[n]) && check(ps[n] + size / 8 - 512, 64, nonces[n]))
				t_ok++;
			else
				t_bad++;
			cbuf_free(ids[n]);
		}
	}
	while (n > 0) {
		n--;
		cbuf_free(ids[n]);
	}
	return NULL;
}

static _Atomic(uint64_t) h_slot[16];
static uint64_t h_nonce[16];
static uint64_t *h_ptr[16];
static long h_iters;

static void *handoff(void *arg)
{
	uint64_t me = (uint64_t)(uintptr_t)arg, x = me * 0x9e3779b97f4a7c15ull + 7;
	for (long i = 0; i < h_iters; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		cbuf_t id;
		uint64_t *p = cbuf_alloc(4096, &id);
		if (!p) {
			t_bad++;
			continue;
		}
		uint64_t nonce = x | 1;
		fill(p, 4096, nonce);
		/* the slot holds an id whose nonce sits beside it; take both
		 * under a "busy" id 1 so no other thread reads a half-swap */
		unsigned s = (unsigned)(x >> 32) % 16;
		uint64_t old;
		do
			old = atomic_exchange(&h_slot[s], 1);
		while (old == 1);
		uint64_t on = h_nonce[s], *q = h_ptr[s];
		h_nonce[s] = nonce;
		h_ptr[s] = p;
		atomic_store(&h_slot[s], id);
		if (old) {
			/* one process: the allocator's reference moves with the
			 * id, and this thread's free caches a buffer another
			 * thread allocated */
			if (check(q, 4096, on))
				t_ok++;
			else
				t_bad++;
			cbuf_free(old);
		}
	}
	return NULL;
}

#define OFF(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
#define SZ(t) printf(#t " %zu\n", sizeof(struct t))

int main(int argc, char **argv)
{
	if (argc >= 2 && argc < 3) {
		fprintf(stderr, "usage: see peer.c\n");
		return 2;
	}
	if (argc >= 3 && !strcmp(argv[2], "layout")) {
		SZ(cbuf_meta); OFF(cbuf_meta, cnt); OFF(cbuf_meta, next);
		SZ(cbuf_dir); OFF(cbuf_dir, page_off); OFF(cbuf_dir, npages); OFF(cbuf_dir, gen);
		SZ(cbuf_hdr); OFF(cbuf_hdr, slot); OFF(cbuf_hdr, max_bufs); OFF(cbuf_hdr, pool_bytes); OFF(cbuf_hdr, meta_off);
		OFF(cbuf_hdr, free_heads); OFF(cbuf_hdr, allocs); OFF(cbuf_hdr, blocked_ns); OFF(cbuf_hdr, tc_flush); OFF(cbuf_hdr, ring_head);
		OFF(cbuf_hdr, ring_tail); OFF(cbuf_hdr, ring); OFF(cbuf_hdr, slot_epoch);
		SZ(cbuf_agg); OFF(cbuf_agg, n); OFF(cbuf_agg, cap); SZ(cbuf_agg_ent); OFF(cbuf_agg_ent, off); OFF(cbuf_agg_ent, len);
		SZ(cbuf_msg); OFF(cbuf_msg, arg2); OFF(cbuf_msg, name); SZ(cbuf_reply);
		printf("CBUF_NEXT_CACHED %u\n", CBUF_NEXT_CACHED);
		printf("CBUF_F_INCONSISTENT %llu\nCBUF_F_RELINQUISH %llu\nCBUF_RECV1 %llu\nCBUF_SENT1 %llu\n",
		       (unsigned long long)CBUF_F_INCONSISTENT, (unsigned long long)CBUF_F_RELINQUISH,
		       (unsigned long long)CBUF_RECV1, (unsigned long long)CBUF_SENT1);
		return 0;
	}
	if (argc < 3)
		return 2;
	int err = cbuf_connect(argv[1]);
	if (err) {
		fprintf(stderr, "cbuf_connect: %s\n", strerror(-err));
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[2], "send") && argc == 5) {
		int n = atoi(argv[3]);
		size_t size = strtoul(argv[4], NULL, 0);
		for (int i = 0; i < n; i++) {
			cbuf_t id;
			uint64_t *p = cbuf_alloc(size, &id);
			if (!p) {
				fprintf(stderr, "cbuf_alloc failed\n");
				return 1;
			}
			uint64_t nonce = ((uint64_t)rand() << 32) ^ (uint64_t)i;
			fill(p, size, nonce);
			cbuf_send(id);
			printf("%" PRIu64 " %" PRIu64 "\n", id, nonce);
			cbuf_free(id);
		}
		char b[16];
		while (fread(b, 1, sizeof(b), stdin) > 0)
			;
		return 0;
	}
	if (!strcmp(argv[2], "recvx") && argc == 4) {
		printf("token %" PRIu64 "\n", cbuf_self());
		argv[2] = "recv";
	}
	if (!strcmp(argv[2], "recv") && argc == 4) {
		size_t size = strtoul(argv[3], NULL, 0);
		uint64_t id, nonce;
		int ok = 0, bad = 0;
		while (scanf("%" SCNu64 " %" SCNu64, &id, &nonce) == 2) {
			const uint64_t *p = cbuf2buf(id, size);
			if (p && check(p, size, nonce))
				ok++;
			else
				bad++;
			if (p)
				cbuf_free(id);
		}
		printf("ok %d bad %d\n", ok, bad);
		return 0;
	}
	if (!strcmp(argv[2], "write") && argc == 5) {
		uint64_t id = strtoull(argv[3], NULL, 0);
		volatile char *p = cbuf2buf(id, strtoul(argv[4], NULL, 0));
		if (!p) {
			printf("null\n");
			return 1;
		}
		printf("mapped\n");
		fflush(stdout);
		p[0] = 1; /* must fault */
		printf("wrote\n");
		return 0;
	}
	if (!strcmp(argv[2], "agg") && argc == 3) {
		cbuf_t h, b, a;
		char *hp = cbuf_alloc(100, &h), *bp = cbuf_alloc(3 * 4096, &b);
		a = cbuf_agg_alloc(8);
		if (!hp || !bp || !a)
			return 1;
		strcpy(hp, "HDR:");
		strcpy(bp + 5000, "payload from C");
		if (cbuf_agg_append(a, b, 5000, 14) || cbuf_agg_prepend(a, h, 0, 4) || cbuf_agg_count(a) != 2 ||
		    cbuf_agg_append(a, b, 0, 5 * 4096) != -ERANGE)
			return 1;
		cbuf_send(a);
		cbuf_send(h);
		cbuf_send(b);
		printf("%" PRIu64 "\n", a);
		char c[16];
		while (fread(c, 1, sizeof(c), stdin) > 0)
			;
		return 0;
	}
	if (!strcmp(argv[2], "threads") && argc == 5) {
		int n = atoi(argv[3]);
		t_iters = atol(argv[4]);
		pthread_t th[64];
		for (int i = 0; i < n && i < 64; i++)
			pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
		for (int i = 0; i < n && i < 64; i++)
			pthread_join(th[i], NULL);
		printf("ok %ld bad %ld\n", (long)t_ok, (long)t_bad);
		return 0;
	}
	if (!strcmp(argv[2], "handoff") && argc == 5) {
		int n = atoi(argv[3]);
		h_iters = atol(argv[4]);
		pthread_t th[64];
		for (int i = 0; i < n && i < 64; i++)
			pthread_create(&th[i], NULL, handoff, (void *)(uintptr_t)(i + 1));
		for (int i = 0; i < n && i < 64; i++)
			pthread_join(th[i], NULL);
		for (int s = 0; s < 16; s++) { /* the main thread frees what is left */
			uint64_t id = atomic_load(&h_slot[s]);
			if (id) {
				if (check(h_ptr[s], 4096, h_nonce[s]))
					t_ok++;
				else
					t_bad++;
				cbuf_free(id);
			}
		}
		printf("ok %ld bad %ld\n", (long)t_ok, (long)t_bad);
		fflush(stdout);
		char line[64];
		while (fgets(line, sizeof(line), stdin))
			;
		return 0;
	}
	if (!strcmp(argv[2], "tcache") && argc == 4) {
		int n = atoi(argv[3]);
		cbuf_t ids[64];
		if (n < 1 || n > 64)
			return 2;
		for (int i = 0; i < n; i++)
			if (!cbuf_alloc(4096, &ids[i]))
				return 1;
		for (int i = 0; i < n; i++)
			cbuf_free(ids[i]);
		printf("cached %d\n", n);
		fflush(stdout);
		char line[64];
		while (fgets(line, sizeof(line), stdin)) {
			cbuf_t id;
			if (!cbuf_alloc(4096, &id))
				return 1;
			cbuf_free(id);
			printf("poked\n");
			fflush(stdout);
		}
		_exit(0); /* no disconnect, no thread-exit drain: the manager reclaims */
	}
	if (!strcmp(argv[2], "fork") && argc == 3) {
		cbuf_t id;
		uint64_t *p = cbuf_alloc(4096, &id);
		if (!p)
			return 1;
		fill(p, 4096, 99);
		cbuf_send(id);
		pid_t pid = fork();
		if (pid == 0) {
			if (cbuf_connect(argv[1])) /* its own component */
				_exit(3);
			const uint64_t *q = cbuf2buf(id, 4096);
			printf("child %s\n", q && check(q, 4096, 99) ? "ok" : "bad");
			cbuf_free(id);
			cbuf_disconnect();
			_exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		cbuf_free(id);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	if (!strcmp(argv[2], "krecv") && (argc == 4 || argc == 5)) {
		int n = atoi(argv[3]), ok = 0, ms = argc == 5 ? atoi(argv[4]) : 2000;
		for (int i = 0; i < n; i++) {
			cbuf_t id;
			if (cbuf_kernel_recv(&id, ms))
				break;
			const uint32_t *r = cbuf2buf(id, 4096);
			/* readable: len (with its NUL) matches the filename at 24.
			 * Not "starts with /": any process on the machine may exec
			 * a relative path, and the component records every exec. */
			if (r && r[1] > 0 && r[1] <= 256 &&
			    strnlen((const char *)r + 24, 256) == r[1] - 1)
				ok++;
			if (r)
				cbuf_free(id);
		}
		printf("kernel ok %d\n", ok);
		return 0;
	}
	if (!strcmp(argv[2], "secret") && argc == 4) {
		cbuf_t id;
		char *p = cbuf_alloc(4096, &id);
		if (!p)
			return 1;
		strcpy(p, argv[3]);
		printf("%" PRIu64 "\n", id);
		char c[16];
		while (fread(c, 1, sizeof(c), stdin) > 0)
			;
		cbuf_free(id);
		return 0;
	}
	if (!strcmp(argv[2], "sendx") && argc == 5) {
		int n = atoi(argv[3]);
		size_t size = strtoul(argv[4], NULL, 0);
		const char *pe = getenv("CBUF_PEER");
		uint64_t peer = pe ? strtoull(pe, NULL, 0) : 0;
		if ((err = cbuf_export())) {
			fprintf(stderr, "cbuf_export: %s\n", strerror(-err));
			return 1;
		}
		for (int i = 0; i < n; i++) {
			cbuf_t id;
			uint64_t *p = cbuf_alloc(size, &id);
			if (!p) {
				fprintf(stderr, "cbuf_alloc failed\n");
				return 1;
			}
			uint64_t nonce = ((uint64_t)rand() << 32) ^ (uint64_t)i;
			fill(p, size, nonce);
			if ((err = cbuf_send_to(id, peer))) {
				fprintf(stderr, "cbuf_send_to: %s\n", strerror(-err));
				return 1;
			}
			printf("%" PRIu64 " %" PRIu64 "\n", id, nonce);
			cbuf_free(id);
		}
		char b[16];
		while (fread(b, 1, sizeof(b), stdin) > 0)
			;
		return 0;
	}
	if (!strcmp(argv[2], "big") && argc == 5) {
		uint64_t id = strtoull(argv[3], NULL, 0);
		void *p = cbuf2buf(id, strtoul(argv[4], NULL, 0));
		printf("%s\n", p ? "mapped" : "null");
		return 0;
	}
	fprintf(stderr, "peer: bad arguments\n");
	return 2;
}
