// SPDX-License-Identifier: GPL-2.0
/* sched_switch table. Slots: 6 prev_pid, 7 next_pid, 8 prev_prio,
 * 9 next_prio, 10 prev_state, 11-12 prev_comm, 13-14 next_comm. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/sched/sched_switch")
int q_sched_switch(struct trace_event_raw_sched_switch *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin(r))
		return 0;
	r[6] = ctx->prev_pid;
	r[7] = ctx->next_pid;
	r[8] = ctx->prev_prio;
	r[9] = ctx->next_prio;
	r[10] = ctx->prev_state;
	bpf_probe_read_kernel(&r[11], 16, ctx->prev_comm);
	bpf_probe_read_kernel(&r[13], 16, ctx->next_comm);
	q_event(r);
	return 0;
}
