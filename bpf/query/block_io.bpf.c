// SPDX-License-Identifier: GPL-2.0
/* block_io table: block_rq_issue/complete joined on (dev, sector). The
 * issuing task gives pid/comm. Slots: 6 dev, 7 sector, 8 bytes, 9 op (first
 * rwbs letter), 10 error, 14 exit_ns, 15 latency_ns. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/block/block_rq_issue")
int q_block_issue(struct trace_event_raw_block_rq *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin_at(r))
		return 0;
	r[6] = ctx->dev;
	r[7] = ctx->sector;
	r[8] = ctx->bytes;
	r[9] = ctx->rwbs[0];
	r[10] = r[14] = r[15] = 0;
	r[Q_JKEY] = ((__u64)ctx->dev << 40) ^ ctx->sector;
	q_enter(r);
	return 0;
}

/* block_rq_complete's record before 5.12 (block_rq_completion since). */
struct trace_event_raw_block_rq_complete {
	struct trace_entry ent;
	dev_t dev;
	sector_t sector;
	unsigned int nr_sector;
	int error;
	char rwbs[8];
} __attribute__((preserve_access_index));

/* Read through BPF_CORE_READ (probe reads): direct loads from both
 * layouts may be merged by the compiler into one load at a computed
 * offset, which the verifier refuses on a tracepoint context. */
#define Q_RQ_COMPLETE(ctx, field) \
	(bpf_core_type_exists(struct trace_event_raw_block_rq_completion) ? \
		 BPF_CORE_READ((struct trace_event_raw_block_rq_completion *)(ctx), field) : \
		 BPF_CORE_READ((struct trace_event_raw_block_rq_complete *)(ctx), field))

SEC("tracepoint/block/block_rq_complete")
int q_block_complete(void *ctx)
{
	__u64 *r = q_record();
	if (!r)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	/* completion runs in whatever context finished the request: the
	 * issuing task's slots come from the entry half */
	r[0] = now;
	r[1] = r[2] = r[3] = r[4] = r[5] = 0;
	r[6] = Q_RQ_COMPLETE(ctx, dev);
	r[7] = Q_RQ_COMPLETE(ctx, sector);
	r[8] = (__u64)Q_RQ_COMPLETE(ctx, nr_sector) << 9;
	r[9] = Q_RQ_COMPLETE(ctx, rwbs[0]);
	r[10] = (__u64)(__s64)Q_RQ_COMPLETE(ctx, error);
	r[14] = now;
	r[15] = 0;
	r[Q_JKEY] = (r[6] << 40) ^ r[7];
	struct q_saved *e = q_exit_lookup(r);
	if (!e)
		return 0;
	/* slots the plan did not keep stay as the completion read them */
#pragma unroll
	for (int i = 0; i < 10; i++)
		if (i < q_nsaved)
			r[i] = e->s[i];
	bpf_map_delete_elem(&q_inflight, &r[Q_JKEY]);
	r[15] = now - r[0];
	q_event(r);
	return 0;
}
