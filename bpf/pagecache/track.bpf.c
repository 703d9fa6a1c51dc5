// SPDX-License-Identifier: GPL-2.0
/* Page-cache tracker: tp_btf programs on the filemap tracepoints report the
 * folios of watched files (pc_files, filled by the agent) charged to one
 * memory cgroup to the agent through a ring buffer, in the order the
 * kernel added and deleted them. The agent applies them to the eviction
 * policy from one thread (the policy framework is single-writer).
 *
 * Access signal: mm_filemap_get_pages, the page range every buffered read
 * (read, pread, readv, sendfile, splice) is served from; only when
 * pc_want_access is set (policies that ignore accesses skip its cost),
 * and sampled (pc_access_mask) when reads are too many to report each:
 * counts stay proportional for LFU-like policies. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cistern/pagecache.h"

const volatile __u64 pc_memcg_id;     /* kernfs id of the memory cgroup; 0: any */
const volatile __u32 pc_want_access;
const volatile __u32 pc_access_mask;  /* report 1 in mask+1 reads (mask+1 a power of 2) */

/* The agent's evicting thread (set by the agent when it runs): the deletes
 * its own fadvise causes are of victims the policy already dropped, so
 * they are not reported (half the events of a scan). */
volatile __u32 pc_self_tid;

/* Wake the agent once this much is queued, not at every event: a wakeup
 * per folio preempted the scanner for every folio it read (the agent also
 * polls every 2 ms while events flow). */
#define PC_WAKE_BYTES (128 * sizeof(struct pc_event))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pc_file_key);
	__type(value, __u32);
} pc_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} pc_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PC_T_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pc_track_stats SEC(".maps");

static __always_inline void stat(__u32 s)
{
	__u64 *v = bpf_map_lookup_elem(&pc_track_stats, &s);

	if (v)
		*v += 1;
}

static __always_inline __u32 file_id(struct address_space *m)
{
	struct inode *host;
	struct pc_file_key k = {};
	__u32 *id;

	if (!m)
		return 0;
	host = m->host;
	if (!host)
		return 0;
	k.ino = host->i_ino;
	k.dev = host->i_sb->s_dev;
	id = bpf_map_lookup_elem(&pc_files, &k);
	return id ? *id : 0;
}

static __always_inline __u8 folio_order_of(struct folio *f)
{
	if (!(f->flags.f & (1UL << PG_head)))
		return 0;
	return f->_flags_1 & 0xff;
}

/* 1 when the folio is charged to the watched memory cgroup. */
static __always_inline int in_memcg(struct folio *f)
{
	unsigned long md;
	struct mem_cgroup *cg;

	if (!pc_memcg_id)
		return 1;
	md = f->memcg_data;
	cg = (struct mem_cgroup *)(md & ~((unsigned long)__NR_MEMCG_DATA_FLAGS - 1));
	if (!cg)
		return 0;
	return BPF_CORE_READ(cg, css.cgroup, kn, id) == pc_memcg_id;
}

static __always_inline void emit(__u8 op, __u8 order, __u32 file, __u64 index, __u32 nr)
{
	struct pc_event *e = bpf_ringbuf_reserve(&pc_events, sizeof(*e), 0);
	__u64 id;

	if (!e) {
		stat(PC_T_DROPPED);
		return;
	}
	id = bpf_get_current_pid_tgid();
	e->op = op;
	e->order = order;
	e->pad = 0;
	e->file = file;
	e->index = index;
	e->tid = (__u32)id;
	e->tgid = id >> 32;
	e->nr = nr;
	e->pad2 = 0;
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&pc_events, BPF_RB_AVAIL_DATA) >= PC_WAKE_BYTES ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

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
	stat(PC_T_ADD);
	emit(PC_ADD, folio_order_of(folio), file, folio->index, 0);
	return 0;
}

SEC("tp_btf/mm_filemap_delete_from_page_cache")
int BPF_PROG(pc_del, struct folio *folio)
{
	__u32 file = file_id(folio->mapping);

	if (!file)
		return 0;
	if (pc_self_tid && (__u32)bpf_get_current_pid_tgid() == pc_self_tid) {
		stat(PC_T_DEL_SELF);
		return 0;
	}
	stat(PC_T_DEL);
	emit(PC_DEL, folio_order_of(folio), file, folio->index, 0);
	return 0;
}

SEC("tp_btf/mm_filemap_get_pages")
int BPF_PROG(pc_read, struct address_space *mapping, unsigned long index, unsigned long last)
{
	__u32 file;

	if (!pc_want_access)
		return 0;
	if (pc_access_mask && (bpf_get_prandom_u32() & pc_access_mask))
		return 0;
	file = file_id(mapping);
	if (!file)
		return 0;
	stat(PC_T_ACC);
	emit(PC_ACC, 0, file, index, last >= index ? last - index + 1 : 1);
	return 0;
}

char _license[] SEC("license") = "GPL";
