/* CBUF client library: zero-copy shared buffers between processes.
 * Link with -lcbuf (pkg-config cbuf). See docs/cbuf.md. */
#ifndef CBUF_H
#define CBUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t cbuf_t;

/* Connect to the manager at socket_path. 0 on success, -errno on failure.
 * CBUF_NAME, CBUF_PRIORITY and CBUF_QOS (blocked-time target in percent) in
 * the environment describe this component to the manager's policy. A forked
 * child must connect itself. */
int cbuf_connect(const char *socket_path);
void cbuf_disconnect(void);

/* Allocate size bytes (rounded up to a power-of-two number of pages, at most
 * 64 pages). NULL if size is 0 or too large, or the manager refuses. */
void *cbuf_alloc(size_t size, cbuf_t *id);
/* Drop one reference. */
void cbuf_free(cbuf_t id);
/* Count a send: call before passing id to another component. */
void cbuf_send(cbuf_t id);
/* Take a reference on a received id. NULL if the id is unknown or stale or
 * size exceeds the buffer. Buffers of other components are read-only. */
void *cbuf2buf(cbuf_t id, size_t size);
/* Size in bytes of a buffer (0 if unknown). */
size_t cbuf_size(cbuf_t id);

/* Aggregates: a cbuf holding (id, offset, length) entries. */
cbuf_t cbuf_agg_alloc(unsigned cap);
int cbuf_agg_append(cbuf_t agg, cbuf_t id, uint32_t off, uint32_t len);
int cbuf_agg_prepend(cbuf_t agg, cbuf_t id, uint32_t off, uint32_t len);
/* Number of entries in a received aggregate, -1 if it is not one. */
int cbuf_agg_count(cbuf_t agg);
/* Entry i: fills id/off/len, 0 on success. */
int cbuf_agg_get(cbuf_t agg, int i, cbuf_t *id, uint32_t *off, uint32_t *len);

/* Next buffer the kernel component sent (manager run with --kernel): 0 and
 * *id set, or -ETIMEDOUT after timeout_ms (at most 5 s), -ENODEV without a
 * kernel part.
 * Take it with cbuf2buf like any received id. */
int cbuf_kernel_recv(cbuf_t *id, int timeout_ms);

/* Sharing across uids (docs/cbuf.md, "Threat model"). Components of one uid
 * read each other's buffers as above. A component of another uid reads a
 * buffer only once it was granted that buffer, and nothing else:
 *  - the receiver tells the sender its token (cbuf_self), out of band;
 *  - the owner calls cbuf_export once, before its first cbuf_alloc, so that
 *    each of its buffers has its own memfd;
 *  - cbuf_grant(id, peer) lets that component map buffer id read-only (the
 *    caller must be able to read id itself); cbuf_send_to = grant + send.
 * A granted buffer is never recycled: when it is dead everywhere it is
 * destroyed and its index gets a new buffer. 0 or -errno: -ESRCH (no such
 * peer), -EACCES (not the caller's to give), -EOPNOTSUPP (owner not
 * exporting), -EBUSY (cbuf_export after an alloc). */
uint64_t cbuf_self(void);
int cbuf_export(void);
int cbuf_grant(cbuf_t id, uint64_t peer);
int cbuf_send_to(cbuf_t id, uint64_t peer);

struct cbuf_stats {
	uint64_t allocs, frees, sends, recvs, collects, blocked_ns;
};
void cbuf_get_stats(struct cbuf_stats *s);

#ifdef __cplusplus
}
#endif
#endif
