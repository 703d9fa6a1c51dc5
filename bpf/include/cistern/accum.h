/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/accum.h - accumulating-channel structures that cross the BPF/user
 * boundary. Mirrored in Go by package accum (accum/record.go); keep the two
 * in step.
 */
#ifndef CISTERN_ACCUM_H
#define CISTERN_ACCUM_H

/* Limits of the run-time flush size (a power of two). A segment header keeps
 * its length in 15 bits, so a batch holds at most 16384 bytes. */
#define ACCUM_MIN_FLUSH 64
#define ACCUM_MAX_FLUSH 16384

/* Segment header inside a batch, two little-endian u16: bit 15 the
 * direction and bits 0..14 the length of the bytes that follow; then bit 15
 * set when more than one fragment made the segment, and bits 0..14 the time
 * of its last fragment in microseconds after the record's first_ns
 * (ACCUM_SEG_TSAT: that late or later, not exact). So each turn of a
 * request/response exchange keeps its own time in a shared batch: a
 * one-fragment request its exact start, an answer its exact end. */
#define ACCUM_SEG_HDR 4
#define ACCUM_SEG_DIR 0x8000
#define ACCUM_SEG_MULTI 0x8000
#define ACCUM_SEG_TSAT 0x7fff

enum accum_dir {
	ACCUM_DIR_WRITE = 0, /* egress: the process sent these bytes */
	ACCUM_DIR_READ = 1,  /* ingress: the process received them */
};

/* Record flags. */
#define ACCUM_F_CLOSE 0x1 /* last record of the connection (may be empty) */
#define ACCUM_F_TIMER 0x2 /* flushed by the latency bound */
#define ACCUM_F_CHUNK 0x4 /* part of a fragment larger than the flush size */

/* Header of every ring-buffer record; len bytes of segments follow. */
struct accum_rec {
	__u64 conn_id;
	__u64 seq;      /* per connection, from 1, consecutive: a gap is a loss */
	__u64 first_ns; /* bpf_ktime_get_ns() of the first and last fragment */
	__u64 last_ns;
	__u32 pid;
	__u32 tid;
	__u32 len;      /* bytes of segments (headers included) after this header */
	__u8 proto;
	__u8 flags;     /* ACCUM_F_* */
	__u8 dir;       /* direction of the first segment */
	__u8 pad;
};

/* Per-CPU counters (accum_stats slots). */
enum accum_stat {
	ACCUM_STAT_RECORDS,         /* records written to the ring */
	ACCUM_STAT_RING_BYTES,      /* ring bytes they took (8-byte ring header and padding included) */
	ACCUM_STAT_PAYLOAD_BYTES,   /* fragment bytes they carried */
	ACCUM_STAT_LOST_RECORDS,    /* records the ring could not take (a seq gap each) */
	ACCUM_STAT_LOST_BYTES,      /* fragment bytes lost, for any reason */
	ACCUM_STAT_BUSY_DROPS,      /* fragments dropped: connection held too long elsewhere */
	ACCUM_STAT_NO_CONN,         /* fragments dropped: connection table full */
	ACCUM_STAT_FAULTS,          /* reads of the source that failed */
	ACCUM_STAT_CONTEXT_FLUSHES, /* flushes for a pid/tid/protocol change */
	ACCUM_STAT_TIMER_FLUSHES,   /* flushes by the latency bound */
	ACCUM_STAT_WAKEUPS,         /* forced reader wakeups */
	ACCUM_STAT_LATE_WAKEUPS,    /* of them, the latency timer's for records written without one */
	ACCUM_STAT_MAX,
};

/* Argument struct of the CISTERN_CALL programs of bpf/accum/driver.bpf.c. */
struct accum_drv_args {
	__u64 conn_id;
	__u64 max_age_ns; /* drv_flush_aged: flush batches at least this old */
	__u32 off;        /* drv_write: bytes [off, off+len) of the staging slot */
	__u32 len;
	__u32 pid;
	__u32 tid;
	__u8 dir;
	__u8 proto;
	__u8 pad[2];
	__s32 ret;
};

#endif /* CISTERN_ACCUM_H */
