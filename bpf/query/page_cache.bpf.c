// SPDX-License-Identifier: GPL-2.0
/* page_cache table: filemap add/delete tracepoints. Slots: 6 event
 * (0 add, 1 delete), 7 dev, 8 inode, 9 index, 10 pages, 11 pfn. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

static __always_inline int q_page(struct trace_event_raw_mm_filemap_op_page_cache *ctx, __u64 ev)
{
	__u64 *r = q_record();
	if (!r || !q_begin(r))
		return 0;
	r[6] = ev;
	r[7] = ctx->s_dev;
	r[8] = ctx->i_ino;
	r[9] = ctx->index;
	/* newer records carry the folio order; older ones are of one page */
	r[10] = bpf_core_field_exists(ctx->order) ? 1ULL << (ctx->order & 31) : 1;
	r[11] = ctx->pfn;
	q_event(r);
	return 0;
}

SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int q_page_add(struct trace_event_raw_mm_filemap_op_page_cache *ctx) { return q_page(ctx, 0); }

SEC("tracepoint/filemap/mm_filemap_delete_from_page_cache")
int q_page_delete(struct trace_event_raw_mm_filemap_op_page_cache *ctx) { return q_page(ctx, 1); }
