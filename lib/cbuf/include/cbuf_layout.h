/* CBUF shared layout: the bytes a client and the manager share. The Go
 * package cbuf mirrors every offset here (cbuf/layout.go) and a test checks
 * them against this header, so C and Go clients interoperate.
 *
 * Per component the manager creates three shared objects:
 *  - pool:  memfd holding the component's buffers. Mapped read-write by its
 *           owner only; every other component gets a read-only fd (O_RDONLY
 *           reopen), so a receiver that writes a received buffer faults.
 *  - meta:  memfd with a header, the collection ring and one cbuf_meta per
 *           global buffer index. Only its component and the manager map it,
 *           so no component can write another's counters.
 * and one object per uid:
 *  - dir:   one cbuf_dir per global buffer index (offset, pages, generation),
 *           written by the manager only (sealed), mapped read-only by that
 *           uid's clients: its own components' buffers, the kernel's and the
 *           ones granted to it. It is the manager's validated view: sizes
 *           come from here, never from client-writable memory.
 * An exporting component's buffers (cbuf_export) live in one memfd each,
 * mapped by the owner at their place in its pool and by grantees alone.
 */
#ifndef CBUF_LAYOUT_H
#define CBUF_LAYOUT_H

#include <stdint.h>

#define CBUF_MAGIC 0x46554243u /* "CBUF" */
#define CBUF_VERSION 1u
#define CBUF_PAGE 4096u
#define CBUF_MAX_COMPONENTS 64u
#define CBUF_CLASSES 7u /* 1, 2, 4, ... 64 pages */
#define CBUF_MAX_PAGES 64u
#define CBUF_RING 4096u /* entries in the collection ring (power of two) */

/* The counter word: reference, sent and received counts and flags packed in
 * one 64-bit word so that cbuf2buf's "ref+1, recv+1" is one atomic add and
 * the manager reads a consistent triple. */
#define CBUF_REF_SHIFT 0
#define CBUF_SENT_SHIFT 16
#define CBUF_RECV_SHIFT 32
#define CBUF_FLAG_SHIFT 48
#define CBUF_REF1 (1ull << CBUF_REF_SHIFT)
#define CBUF_SENT1 (1ull << CBUF_SENT_SHIFT)
#define CBUF_RECV1 (1ull << CBUF_RECV_SHIFT)
#define CBUF_F_INCONSISTENT (1ull << (CBUF_FLAG_SHIFT + 0)) /* manager took it back from the free list */
#define CBUF_F_RELINQUISH (1ull << (CBUF_FLAG_SHIFT + 1))   /* tell the manager when ref drops to 0 */
#define CBUF_F_GRANTED (1ull << (CBUF_FLAG_SHIFT + 2))      /* granted to another uid: never recycled by the owner */
#define CBUF_CNT(w, shift) ((uint32_t)(((w) >> (shift)) & 0xffffu))

/* next: 0 = not on a free list; CBUF_NEXT_END = last on a free list;
 * CBUF_NEXT_CACHED = in a thread cache of its owner (the counter word is
 * then exactly CBUF_REF1: the cache holds the reference, so the manager
 * sees it in use and a dead owner's cached buffers are reclaimed like any
 * it held); otherwise index+1 of the next free buffer. */
#define CBUF_NEXT_END 0xffffffffu
#define CBUF_NEXT_CACHED 0xfffffffeu

struct cbuf_meta {
	uint64_t cnt;
	uint32_t next;
	uint32_t pad;
};

struct cbuf_dir {
	uint32_t page_off; /* first page of the buffer in its owner's pool */
	uint16_t npages;   /* 0: no buffer at this index */
	uint16_t gen;      /* bumped each time the index is reused */
};

/* Free-list head: tag << 32 | (index + 1); the tag changes on every push and
 * pop (ABA protection with a single-word CAS). */
struct cbuf_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t slot;
	uint32_t max_bufs; /* buffer indexes per component */
	uint64_t pool_bytes;
	uint64_t meta_off; /* byte offset of cbuf_meta[0] in the meta object */
	uint64_t free_heads[8];
	/* Client-reported counters (informational; the manager measures what
	 * policies use itself). */
	uint64_t allocs;
	uint64_t frees;
	uint64_t sends;
	uint64_t recvs;
	uint64_t collects;
	uint64_t blocked_ns;
	/* Bumped by the manager when it wants the client's thread caches back
	 * on the free lists (a collection blocks, a pool is over its quota):
	 * each thread drains its cache at its next alloc or free. */
	uint64_t tc_flush;
	uint64_t pad0;
	/* Collection ring: the manager produces buffer indexes, the client
	 * consumes them. Separate cache lines for the two ends. */
	uint32_t ring_head;
	uint32_t pad1[15];
	uint32_t ring_tail;
	uint32_t pad2[15];
	uint32_t ring[CBUF_RING];
	/* Components each slot has had (bumped by the manager at every HELLO):
	 * a mapping of a slot's pool made under another epoch belongs to a
	 * component that has left, and is dropped. */
	uint32_t slot_epoch[CBUF_MAX_COMPONENTS];
};

/* Global buffer index and ids: id = gen << 48 | slot << 32 | index; gen is
 * never 0, so no valid id is 0. */
#define CBUF_ID(gen, slot, idx) (((uint64_t)(gen) << 48) | ((uint64_t)(slot) << 32) | (uint64_t)(idx))
#define CBUF_ID_GEN(id) ((uint16_t)((id) >> 48))
#define CBUF_ID_SLOT(id) ((uint32_t)(((id) >> 32) & 0xffffu))
#define CBUF_ID_IDX(id) ((uint32_t)(id))

/* Aggregate cbufs: a cbuf whose payload is a cbuf_agg header followed by
 * n cbuf_agg_ent entries. */
struct cbuf_agg_ent {
	uint64_t id;
	uint32_t off;
	uint32_t len;
};
struct cbuf_agg {
	uint32_t magic; /* CBUF_AGG_MAGIC */
	uint32_t n;
	uint32_t cap;
	uint32_t pad;
	struct cbuf_agg_ent ent[];
};
#define CBUF_AGG_MAGIC 0x47474143u /* "CAGG" */

/* Wire protocol on the manager's SOCK_SEQPACKET socket. */
enum cbuf_op {
	CBUF_OP_HELLO = 1,   /* arg: priority, arg2: qos target (ppm); reply arg: slot, arg2: token; fds: meta, pool, dir */
	CBUF_OP_COLLECT = 2, /* arg: size class; reply: buffers pushed to the ring */
	CBUF_OP_MAP = 3,     /* arg: slot; reply fd: that slot's pool, read-only */
	CBUF_OP_RELINQUISH = 4, /* no reply: a relinquish-flagged buffer is free */
	CBUF_OP_STATS = 5,   /* reply: JSON text after the header */
	CBUF_OP_KRECV = 6,   /* arg: timeout ms; reply arg2: id of a buffer the kernel sent */
	CBUF_OP_EXPORT = 7,  /* before the first alloc: one memfd per buffer, so buffers can be granted */
	CBUF_OP_BUFFD = 8,   /* arg: index, arg2: gen; reply fd: own buffer, read-write (exporting owner) */
	CBUF_OP_MAPBUF = 9,  /* arg2: id; reply fd: that buffer only, read-only; reply arg2: bytes */
	CBUF_OP_GRANT = 10,  /* arg2: id, name[0..7]: the peer's token (HELLO's reply arg2) */
};
/* MAP of a pool whose buffers are mapped one by one (an exporting owner)
 * replies -EXDEV: ask MAPBUF per buffer instead. */
/* The kernel component (when the manager runs with --kernel) owns the last
 * slot; MAP of it replies arg2 = the bytes to map (its pool is smaller). */
#define CBUF_KERNEL_SLOT (CBUF_MAX_COMPONENTS - 1)
struct cbuf_msg {
	uint32_t op;
	uint32_t arg;
	uint64_t arg2;
	char name[48];
};
struct cbuf_reply {
	int32_t status; /* 0 or -errno */
	uint32_t arg;
	uint64_t arg2;
};

#endif
