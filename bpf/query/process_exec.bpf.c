// SPDX-License-Identifier: GPL-2.0
/* process_exec table. Slots: 6 old_pid, 7-14 filename (64 bytes). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/sched/sched_process_exec")
int q_process_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin(r))
		return 0;
	r[6] = ctx->old_pid;
#pragma unroll
	for (int i = 7; i < 15; i++)
		r[i] = 0;
	unsigned int off = ctx->__data_loc_filename & 0xFFFF;
	bpf_probe_read_kernel_str(&r[7], 64, (void *)ctx + off);
	q_event(r);
	return 0;
}
