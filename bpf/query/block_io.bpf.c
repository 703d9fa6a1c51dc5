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

SEC("tracepoint/block/block_rq_complete")
int q_block_complete(struct trace_event_raw_block_rq_completion *ctx)
{
	__u64 *r = q_record();
	if (!r)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	/* completion runs in whatever context finished the request: the
	 * issuing task's slots come from the entry half */
	r[0] = now;
	r[1] = r[2] = r[3] = r[4] = r[5] = 0;
	r[6] = ctx->dev;
	r[7] = ctx->sector;
	r[8] = (__u64)ctx->nr_sector << 9;
	r[9] = ctx->rwbs[0];
	r[10] = (__u64)(__s64)ctx->error;
	r[14] = now;
	r[15] = 0;
	r[Q_JKEY] = ((__u64)ctx->dev << 40) ^ ctx->sector;
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
