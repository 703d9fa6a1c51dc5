// SPDX-License-Identifier: GPL-2.0
/* Page-cache tracker: tp_btf programs on the filemap tracepoints see the
 * folios of watched files (pc_files, filled by the agent) charged to one
 * memory cgroup, and hand each event to the policy in the kernel
 * (pc_event_reserve/commit, apply.bpf.h), in the order the kernel added and deleted
 * them. Included by apply.bpf.h, after the policy: one object per policy.
 *
 * Access signal: mm_filemap_get_pages, the page range every buffered read
 * (read, pread, readv, sendfile, splice) is served from; only when
 * pc_want_access is set (policies that ignore accesses skip its cost),
 * and sampled (pc_access_mask) when reads are too many to apply each:
 * counts stay proportional for LFU-like policies. */
#ifndef CISTERN_PC_TRACK_BPF_H
#define CISTERN_PC_TRACK_BPF_H

#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cistern/pagecache.h"

const volatile __u64 pc_memcg_id;     /* kernfs id of the memory cgroup; 0: any */
const volatile __u32 pc_want_access;
const volatile __u32 pc_access_mask;  /* report 1 in mask+1 reads (mask+1 a power of 2) */
/* Spatial sampling (SHARDS, the recorder's object for --policy auto): only
 * reads touching a page whose key (file << 32 | index) times 2^64/phi is
 * below this are reported, with no per-thread read state; 0: every page.
 * A page is always or never sampled, so its reuse distances stay exact and
 * a cache of C pages is simulated as one of C x rate. */
const volatile __u64 pc_shards_threshold;
/* Scan detection (get-scan without scanner ids): a folio added by a thread
 * whose latest read asked for at least this many pages is a scan's
 * (PC_EV_SCAN, EVICT_REQ_SCAN to the policy); 0: off. A read(2)'s first
 * page batch is reported after the folios its readahead added, so those
 * are judged by the thread's read before: a scanner's reads are all large
 * and a point reader's all small, which is what this tells apart. The
 * read tracepoints fire for every thread, so with it on each thread that
 * reads keeps its latest size in pc_reads (a lookup a read, an insert a
 * new thread; sizes only, never data). */
const volatile __u32 pc_scan_pages;

/* The agent's evicting thread (set by the agent when it runs): the deletes
 * its own fadvise causes are of victims the policy already dropped, so
 * they are not applied (half the events of a scan); their pages are
 * counted in pc_self_pages, which tells the agent what its fadvise freed
 * without a cachestat per range. */
volatile __u32 pc_self_tid;
__u64 pc_self_pages;

#define PF_MEMALLOC 0x00000800 /* include/linux/sched.h: the task is reclaiming */

/* True while the current task reclaims memory (direct or memcg reclaim set
 * PF_MEMALLOC around it): a delete then is the kernel's choice, even on the
 * agent's thread, and the policy must hear of it. */
static __always_inline int reclaiming(void)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();

	return (BPF_CORE_READ(t, flags) & PF_MEMALLOC) != 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pc_file_key);
	__type(value, __u32);
} pc_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PC_T_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pc_track_stats SEC(".maps");

static __always_inline void statn(__u32 s, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&pc_track_stats, &s);

	if (v)
		*v += n;
}

static __always_inline void stat(__u32 s)
{
	statn(s, 1);
}

/* Read with BPF_CORE_READ, not dereferenced: pc_read is a raw_tp
 * program, whose arguments the verifier does not type. */
static __always_inline __u32 file_id(struct address_space *m)
{
	struct inode *host;
	struct pc_file_key k = {};
	__u32 *id;

	if (!m)
		return 0;
	host = BPF_CORE_READ(m, host);
	if (!host)
		return 0;
	k.ino = BPF_CORE_READ(host, i_ino);
	k.dev = BPF_CORE_READ(host, i_sb, s_dev);
	id = bpf_map_lookup_elem(&pc_files, &k);
	return id ? *id : 0;
}

/* The file id of the mapping this CPU looked up last: reads come in runs
 * of the same file, and file_id costs four probe reads and a hash lookup.
 * Checked by the mapping's address and its inode's number: an address
 * names another file only after this one left memory, and then the inode
 * number differs but for a coincidence. */
struct pc_file_memo {
	__u64 mapping;
	__u64 ino;
	__u32 file;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pc_file_memo);
} pc_file_memos SEC(".maps");

static __always_inline __u32 file_id_memo(struct address_space *m)
{
	__u32 zero = 0, file;
	struct pc_file_memo *c = bpf_map_lookup_elem(&pc_file_memos, &zero);
	__u64 ino;

	if (!m)
		return 0;
	ino = BPF_CORE_READ(m, host, i_ino);
	if (c && c->mapping == (__u64)m && c->ino == ino)
		return c->file;
	file = file_id(m);
	if (c && file) { /* not a miss: a file registered later must be found */
		c->mapping = (__u64)m;
		c->ino = ino;
		c->file = file;
	}
	return file;
}

/* struct folio as older kernels lay it out, for CO-RE: until 6.12 flags is
 * a plain unsigned long (memdesc_flags_t since), and until 6.6 the order
 * is a byte of its own (the low byte of _flags_1 since). */
struct folio___flags_ul {
	unsigned long flags;
} __attribute__((preserve_access_index));

struct folio___order_byte {
	unsigned char _folio_order;
} __attribute__((preserve_access_index));

static __always_inline unsigned long folio_flags_of(struct folio *f)
{
	struct folio___flags_ul *fu = (void *)f;

	if (bpf_core_field_exists(fu->flags))
		return fu->flags;
	return f->flags.f;
}

static __always_inline __u8 folio_order_of(struct folio *f)
{
	struct folio___order_byte *fo = (void *)f;

	if (!(folio_flags_of(f) & (1UL << bpf_core_enum_value(enum pageflags, PG_head))))
		return 0;
	if (bpf_core_field_exists(fo->_folio_order))
		return fo->_folio_order;
	return f->_flags_1 & 0xff;
}

/* struct obj_cgroup as 7.x lays it out. Its is_root came with the change
 * that charges LRU folios to an obj_cgroup (memcg_data points to one, whose
 * memcg is the folio's memory cgroup, so a cgroup's pages can be reparented
 * when it dies); before it, memcg_data points to the mem_cgroup itself. */
struct obj_cgroup___lru {
	struct mem_cgroup *memcg;
	bool is_root;
} __attribute__((preserve_access_index));

/* 1 when the folio is charged to the watched memory cgroup. */
static __always_inline int in_memcg(struct folio *f)
{
	unsigned long md, nflags = bpf_core_enum_value(enum page_memcg_data_flags, __NR_MEMCG_DATA_FLAGS);
	struct mem_cgroup *cg;

	if (!pc_memcg_id)
		return 1;
	md = f->memcg_data;
	cg = (struct mem_cgroup *)(md & ~(nflags - 1));
	if (!cg)
		return 0;
	if (bpf_core_field_exists(struct obj_cgroup___lru, is_root))
		cg = BPF_CORE_READ((struct obj_cgroup___lru *)cg, memcg);
	return BPF_CORE_READ(cg, css.cgroup, kn, id) == pc_memcg_id;
}

/* Each thread's latest read (pc_read, sys_read): its batches, whether it
 * is reported, and its size, which tells a scanner (pc_scan_pages). */
struct pc_read_state {
	__u64 mapping;
	__u64 index; /* the latest call's first page */
	__u64 last;
	__u32 file;
	__u32 read;  /* the thread's read number */
	__u32 on;    /* 0: the read is not reported (sampled out) */
	__u32 pages; /* the read's size, at its first call (scan detection) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* thread id */
	__type(value, struct pc_read_state);
} pc_reads SEC(".maps");

/* pc_read's new state is built here, not on its stack: the policy's call
 * chain below pc_read needs all but a few bytes of 6.1's 512. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pc_read_state);
} pc_read_scratch SEC(".maps");

/* The includer defines pc_event_reserve (a place for the event, NULL when
 * full) and pc_event_commit (hands it on): apply.bpf.h queues it for the
 * policy, track.bpf.c puts it in a ring buffer. */
static __always_inline void emit(__u8 op, __u8 order, __u32 file, __u64 index, __u32 nr, __u32 read, __u16 flags)
{
	__u64 id = bpf_get_current_pid_tgid(), tag = 0;
	struct pc_event *e = pc_event_reserve(&tag);

	if (!e) {
		stat(PC_T_DROPPED);
		return;
	}
	e->op = op;
	e->order = order;
	e->flags = flags;
	e->file = file;
	e->index = index;
	e->tid = (__u32)id;
	e->tgid = id >> 32;
	e->nr = nr;
	e->read = read;
	pc_event_commit(e, tag);
}

/* 1 when the current thread's latest read asked for pc_scan_pages or more. */
static __always_inline int added_by_scanner(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pc_read_state *st;

	if (!pc_scan_pages)
		return 0;
	st = bpf_map_lookup_elem(&pc_reads, &tid);
	return st && st->pages >= pc_scan_pages;
}

/* PC_EV_SCAN for a read of pages pages: a scanner's (pc_scan_pages). */
static __always_inline __u16 scan_flag(__u64 pages)
{
	return pc_scan_pages && pages >= pc_scan_pages ? PC_EV_SCAN : 0;
}

/* Keeps the size of a read the access sample left out, for scan
 * detection: in place, or as a new thread's state (reported: no). */
static __always_inline void note_read_size(__u32 tid, struct pc_read_state *st, __u64 mapping, __u64 index, __u64 last, __u32 pages)
{
	__u32 zero = 0;
	struct pc_read_state *w;

	if (st || !pc_scan_pages) {
		if (st)
			st->pages = pages;
		return;
	}
	w = bpf_map_lookup_elem(&pc_read_scratch, &zero);
	if (!w)
		return;
	w->mapping = mapping;
	w->index = index;
	w->last = last;
	w->file = 0;
	w->read = bpf_get_prandom_u32();
	w->on = 0;
	w->pages = pages;
	bpf_map_update_elem(&pc_reads, &tid, w, BPF_ANY);
}

__noinline int pc_sampled(__u32 file, __u64 first, __u64 last);

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(pc_add, struct folio *folio)
{
	__u32 file = file_id(folio->mapping);

	if (!file)
		return 0;
	if (!in_memcg(folio)) {
		stat(PC_T_ADD_OTHER);
		return 0;
	}
	if (pc_shards_threshold && !pc_sampled(file, folio->index, folio->index + (1ULL << (folio_order_of(folio) & 15)) - 1))
		return 0; /* auto's sampler: only sampled pages' loads */
	stat(PC_T_ADD);
	/* Pages, as the trace counts an add (pctrace.Summary.PagesLoaded):
	 * the bench's live page loads of an agent run, which memory.stat's
	 * pgpgin cannot give (it counts anonymous pages too). */
	statn(PC_T_ADD_PAGES, 1ULL << (folio_order_of(folio) & 15));
	emit(PC_ADD, folio_order_of(folio), file, folio->index, 0, 0, added_by_scanner() ? PC_EV_SCAN : 0);
	return 0;
}

SEC("tp_btf/mm_filemap_delete_from_page_cache")
int BPF_PROG(pc_del, struct folio *folio)
{
	__u32 file = file_id(folio->mapping);

	if (!file)
		return 0;
	if (pc_self_tid && (__u32)bpf_get_current_pid_tgid() == pc_self_tid && !reclaiming()) {
		stat(PC_T_DEL_SELF);
		__sync_fetch_and_add(&pc_self_pages, 1ULL << (folio_order_of(folio) & 15));
		return 0;
	}
	if (pc_shards_threshold && !pc_sampled(file, folio->index, folio->index + (1ULL << (folio_order_of(folio) & 15)) - 1))
		return 0;
	stat(PC_T_DEL);
	emit(PC_DEL, folio_order_of(folio), file, folio->index, 0, 0, 0);
	return 0;
}

#define PC_PAGE_SHIFT 12
#define PC_SHARDS_MUL 0x9E3779B97F4A7C15ULL

struct pc_shards_loop {
	__u64 base; /* key of the first page */
	__u32 hit;
};

static long pc_shards_step(__u64 i, void *arg)
{
	struct pc_shards_loop *l = arg;
	__u64 key = (l->base & 0xffffffff00000000ULL) | (__u32)(l->base + i);

	if (key * PC_SHARDS_MUL < pc_shards_threshold) {
		l->hit = 1;
		return 1;
	}
	return 0;
}

/* 1 when pages [first, last] of file hold a sampled page (at most
 * PC_SHARDS_MAX_PAGES of them looked at; the loop ends at the first
 * sampled page, ~2^bits in). Every page: the kernel reads and loads them
 * all, and auto's kernel model must see the pages the cgroup loads. Until
 * session 31 only the policies' PC_MAX_ACC_PAGES were looked at: of
 * GET-SCAN's 1 MiB scan reads, one batch each in large folios, the model
 * saw a quarter, a quarter of the scan's pressure, and kept the hot set
 * the kernel lost. A global function: its loop state is in its own frame,
 * not in pc_read's (the policy's call chain below pc_read needs all of
 * 6.1's 512 bytes). */
__noinline int pc_sampled(__u32 file, __u64 first, __u64 last)
{
	struct pc_shards_loop l = { .base = (__u64)file << 32 | (__u32)first };
	__u64 n = last >= first ? last - first + 1 : 1;

	if (!pc_shards_threshold)
		return 1;
	if (n == 1) /* a one-page read: no loop */
		return l.base * PC_SHARDS_MUL < pc_shards_threshold;
	if (n > PC_SHARDS_MAX_PAGES)
		n = PC_SHARDS_MAX_PAGES;
	bpf_loop(n, pc_shards_step, &l, 0);
	return l.hit;
}

/* The last page of a read of [index, last] of mapping that exists: the
 * range is what the caller asked for, and a read with a buffer larger than
 * the rest of the file (ripgrep's, on small files) names pages past its
 * end, which no read finds and no miss loads. ~0 when index is past it. */
__noinline __u64 pc_eof_last(__u64 mapping, __u64 index, __u64 last)
{
	struct address_space *m = (struct address_space *)mapping;
	long long size = BPF_CORE_READ(m, host, i_size);
	__u64 eof;

	if (size <= 0)
		return ~0ULL;
	eof = (__u64)(size - 1) >> PC_PAGE_SHIFT;
	if (index > eof)
		return ~0ULL;
	return last > eof ? eof : last;
}

/* Reads: one event per page range a buffered read is served from. A
 * raw_tp program, so that the object loads where the tracepoint does not
 * exist (it came in Linux 6.10); the agent attaches it where
 * kernel.FilemapGetPages() says it exists, else pc_sys_read and
 * pc_sys_pread below. */
static __always_inline int want_read(void)
{
	if (!pc_want_access)
		return 0;
	return !pc_access_mask || !(bpf_get_prandom_u32() & pc_access_mask);
}

/* Writes: a folio of a watched file made dirty (clean to dirty: later
 * writes before its writeback are not seen again), reported as an access
 * of its pages (PC_EV_WRITE) where accesses are wanted. A write to a
 * cached page adds nothing, so without it a page written again and again
 * (the tail of RocksDB's write-ahead log) looked read never: a policy
 * evicted it, and the next append read it back from the disk inside the
 * write. The write that added a folio dirties it right after: with
 * pc_skip_first_read that is the folio's first access, and a read after it
 * is a hit, as a read of a written page is. */
SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(pc_dirty, struct folio *folio, struct address_space *mapping)
{
	__u32 file;
	__u8 order;

	if (!want_read())
		return 0;
	file = file_id_memo(mapping);
	if (!file)
		return 0;
	if (!in_memcg(folio))
		return 0;
	order = folio_order_of(folio);
	if (pc_shards_threshold && !pc_sampled(file, folio->index, folio->index + (1ULL << (order & 15)) - 1))
		return 0;
	stat(PC_T_WRITE);
	emit(PC_ACC, order, file, folio->index, 1U << (order & 15), 0, PC_EV_WRITE);
	return 0;
}


/* One read(2) calls filemap_get_pages once per batch of folios (at most
 * 31), and the tracepoint gives every call the rest of the read,
 * [position, end]: a 32-page read of small folios reports [0, 31] and then
 * [31, 31] (or [32, 63], [33, 63]); with 4 KiB folios a scan reported 1.5
 * reads a page, and each page read twice within one read(2) looked like a
 * hit at age 0 to LHD (6.12 without large folios: the scan outranked the
 * hot set). A thread's later call for the same mapping and end, further on,
 * continues its read: it is reported with the same read number (pages it
 * repeats are not hits again: pc_apply), and never sampled on its own. */
SEC("raw_tp/mm_filemap_get_pages")
int BPF_PROG(pc_read, struct address_space *mapping, unsigned long index, unsigned long last)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), file, zero = 0;
	struct pc_read_state *st, *w;

	if (!pc_want_access)
		return 0;
	if (pc_shards_threshold) { /* sampled: no read state */
		/* Most reads are not sampled: that is told first (pages past
		 * the end of the file count as sampled here), the end of the
		 * file read only for those that are. */
		file = file_id_memo(mapping);
		if (!file)
			return 0;
		if (last - index >= PC_MAX_ACC_PAGES) { /* a large read: its pages, not its buffer's */
			last = pc_eof_last((__u64)mapping, index, last);
			if (last == ~0UL || !pc_sampled(file, index, last))
				return 0;
		} else {
			if (!pc_sampled(file, index, last))
				return 0;
			last = pc_eof_last((__u64)mapping, index, last);
			if (last == ~0UL || !pc_sampled(file, index, last))
				return 0;
		}
		stat(PC_T_ACC);
		emit(PC_ACC, 0, file, index, last - index + 1, 0, 0);
		return 0;
	}
	last = pc_eof_last((__u64)mapping, index, last);
	if (last == ~0UL)
		return 0;
	st = bpf_map_lookup_elem(&pc_reads, &tid);
	if (st && st->mapping == (__u64)mapping && st->last == last && index > st->index && index <= last) {
		st->index = index;
		if (!st->on)
			return 0;
		stat(PC_T_ACC_MORE);
		emit(PC_ACC, 0, st->file, index, last - index + 1, st->read, scan_flag(st->pages));
		return 0;
	}
	if (!want_read()) {
		if (st) { /* sampled out: so are its later batches */
			if (st->mapping != (__u64)mapping)
				st->file = 0;
			st->mapping = (__u64)mapping;
			st->index = index;
			st->last = last;
			st->on = 0;
		}
		note_read_size(tid, st, (__u64)mapping, index, last, last >= index ? last - index + 1 : 1);
		return 0;
	}
	/* The thread's last read was of this file: its id is known (a
	 * mapping is an inode's: its address names another file only once
	 * this one is gone from memory, its pages with it). */
	if (st && st->mapping == (__u64)mapping && st->file)
		file = st->file;
	else
		file = file_id_memo(mapping);
	if (!file) {
		if (st)
			st->mapping = 0;
		return 0;
	}
	/* A known thread's state is written in place (an update of an LRU
	 * map allocates); a new thread's is built in pc_read_scratch and
	 * inserted. */
	w = st;
	if (!w) {
		w = bpf_map_lookup_elem(&pc_read_scratch, &zero);
		if (!w)
			return 0;
		w->read = bpf_get_prandom_u32();
		w->pages = 0;
	}
	w->mapping = (__u64)mapping;
	w->index = index;
	w->last = last;
	w->file = file;
	w->read = w->read + 1 ? w->read + 1 : 1;
	w->on = 1;
	w->pages = last >= index ? last - index + 1 : 1;
	if (!st)
		bpf_map_update_elem(&pc_reads, &tid, w, BPF_ANY);
	stat(PC_T_ACC);
	emit(PC_ACC, 0, file, index, last >= index ? last - index + 1 : 1, w->read, scan_flag(w->pages));
	return 0;
}

/* The access signal where mm_filemap_get_pages is missing: read(2) and
 * pread64(2) of a watched file, as the page range [pos, pos + count)
 * clipped to the file's size (O_DIRECT reads skip the page cache and are
 * not reported). readv, sendfile and splice are not seen this way. */
#define PC_O_DIRECT 040000 /* x86 */

static __always_inline int sys_read(unsigned long fd, unsigned long count, long long pos, int use_fpos)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt;
	struct file **fds, *f = 0;
	struct address_space *m;
	long long size;
	unsigned long first, last;
	__u32 file;
	__u16 scan;

	if (!count)
		return 0;
	scan = scan_flag((count + 4095) >> PC_PAGE_SHIFT); /* as asked, not clipped */
	if (pc_scan_pages) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();

		note_read_size(tid, bpf_map_lookup_elem(&pc_reads, &tid), 0, 0, 0, (count + 4095) >> PC_PAGE_SHIFT);
	}
	if (!want_read())
		return 0;
	fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	if (BPF_CORE_READ(f, f_flags) & PC_O_DIRECT)
		return 0;
	m = BPF_CORE_READ(f, f_mapping);
	file = file_id_memo(m);
	if (!file)
		return 0;
	if (use_fpos)
		pos = BPF_CORE_READ(f, f_pos);
	size = BPF_CORE_READ(m, host, i_size);
	if (pos < 0 || pos >= size)
		return 0;
	if (count > size - pos)
		count = size - pos;
	first = pos >> PC_PAGE_SHIFT;
	last = (pos + count - 1) >> PC_PAGE_SHIFT;
	if (!pc_sampled(file, first, last))
		return 0;
	stat(PC_T_ACC);
	emit(PC_ACC, 0, file, first, last - first + 1, 0, scan);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_read")
int pc_sys_read(struct trace_event_raw_sys_enter *ctx)
{
	return sys_read(ctx->args[0], ctx->args[2], 0, 1);
}

SEC("tracepoint/syscalls/sys_enter_pread64")
int pc_sys_pread(struct trace_event_raw_sys_enter *ctx)
{
	return sys_read(ctx->args[0], ctx->args[2], ctx->args[3], 0);
}

#endif
