/* SPDX-License-Identifier: GPL-2.0 */
/* cistern/pagecache.h - structs shared by bpf/pagecache/ and package
 * pagecache (Go mirrors every layout here; change both together). */
#ifndef CISTERN_PAGECACHE_H
#define CISTERN_PAGECACHE_H

#define PC_BATCH 4096        /* events per pc_apply run (power of 2) */
#define PC_MAX_VICTIMS 1024  /* victims per pc_apply run (power of 2) */
#define PC_MAX_ACC_PAGES 64  /* pages of one read looked up for accessed() */
#define PC_SHARDS_MAX_PAGES 65536 /* pages of one read or folio auto's sampler looks at */
#define PC_QUEUE_LEN 8192    /* events waiting for the policy's lock (power of 2) */
#define PC_PUSH_TRIES 8      /* reservation attempts before an event is dropped */
#define PC_COMBINE_ROUNDS 4  /* lock rounds one event's program makes at most */
#define PC_EBUSY 16          /* pc_apply: the policy's lock is held (try again) */

enum pc_op { PC_ADD = 1, PC_DEL = 2, PC_ACC = 3 };

/* pc_event.flags of PC_ADD and PC_ACC: added or read by a thread detected
 * as a scanner (pc_scan_pages in track.bpf.h). */
#define PC_EV_SCAN 1
/* pc_event.flags of PC_ACC: a write made the folio dirty (pc_dirty), not a
 * read; nr is the folio's pages. */
#define PC_EV_WRITE 2

/* Files the agent watches: (device, inode) -> file id (>= 1). */
struct pc_file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

/* One event (queued for the policy); the policy key of a folio is file << 32 | index. */
struct pc_event {
	__u8 op;
	__u8 order;   /* PC_ADD, PC_DEL: folio order */
	__u16 flags;  /* PC_ADD: PC_EV_* */
	__u32 file;
	__u64 index;  /* first page */
	__u32 tid;
	__u32 tgid;
	__u32 nr;     /* PC_ACC: pages read */
	__u32 read;   /* PC_ACC: the read's number in its thread (0: none);
	               * events of one read(2) share it (see pc_read) */
};

/* A slot of the MPSC queue (apply.bpf.h): seq is lap (the position with
 * the index bits cleared) while the slot is free for the producer of that
 * lap, lap + 1 once its event is published, lap + PC_QUEUE_LEN once the
 * consumer took it (free for the next lap). Zeroed maps start free. */
struct pc_qslot {
	__u64 seq;
	struct pc_event ev;
};

struct pc_batch {
	__u32 n;
	__u32 pad;
	struct pc_event ev[PC_BATCH];
};

struct pc_victim {
	__u64 key;
	__u32 pages;
	__u32 pad;
};

struct pc_victims {
	__u32 n;
	__u32 pages;  /* pages the n victims cover */
	struct pc_victim v[PC_MAX_VICTIMS];
};

/* Context of pc_apply: apply the queue and the batch (the agent's victims
 * that stayed cached, added back; the seed) as far as the queue takes it
 * (taken), then propose victims until they cover want pages (at most
 * PC_MAX_VICTIMS of them). ret -PC_EBUSY: the lock was held, nothing done. */
struct pc_run_args {
	__s32 ret;
	__u32 want;    /* pages */
	__u32 got;     /* out: victims written */
	__u32 taken;   /* out: the batch's events queued (the rest: call again) */
};

/* pc_track_stats (per CPU) */
enum pc_track_stat {
	PC_T_ADD,        /* folios added to watched files in the cgroup */
	PC_T_ADD_OTHER,  /* added to watched files, charged elsewhere */
	PC_T_DEL,
	PC_T_ACC,
	PC_T_DROPPED,    /* events lost: the queue full (or contended PC_PUSH_TRIES times) */
	PC_T_DEL_SELF,   /* deletes by the agent's own evictions (not reported) */
	PC_T_ACC_MORE,   /* later page batches of a read already reported */
	PC_T_QUEUED,     /* events left in the queue for the lock's holder */
	PC_T_ADD_PAGES,  /* pages PC_T_ADD's folios span (1 << order each): the
			  * loads the access trace counts, the agent's own */
	PC_T_WRITE,      /* folios of watched files a write made dirty (pc_dirty) */
	PC_T_MAX,
};

/* pc_apply_stats (per CPU) */
enum pc_apply_stat {
	PC_A_ADDED,        /* entries inserted */
	PC_A_READDED,      /* ADD of a key already tracked (replaced) */
	PC_A_REMOVED,      /* DEL of a tracked key */
	PC_A_DEL_UNKNOWN,  /* DEL of a key not tracked (already proposed) */
	PC_A_ACC_HITS,     /* pages of reads found tracked */
	PC_A_VICTIMS,      /* victims proposed to the agent */
	PC_A_FULL,         /* victims made because the tracker was full */
	PC_A_FIRST_READS,  /* first reads of new folios, not passed on as hits */
	PC_A_READ_AGAIN,   /* folios a read's later batch reported again: not hits */
	PC_A_APPLIED,      /* events applied to the policy */
	PC_A_BUSY,         /* pc_apply calls that found the lock held (EBUSY) */
	PC_A_SWEPT,        /* events the timer applied (stranded in the queue) */
	PC_A_WAKEUPS,      /* wakeups sent to the agent (tracked pages crossed pc_wake_pages) */
	PC_A_MAX,
};

#endif
