// SPDX-License-Identifier: GPL-2.0
/* process_exit table. Slots: 6 prio, 7 group_dead, 8 exit_code. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/sched/sched_process_exit")
int q_process_exit(struct trace_event_raw_sched_process_exit *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin(r))
		return 0;
	r[6] = ctx->prio;
	r[7] = ctx->group_dead;
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	r[8] = BPF_CORE_READ(t, exit_code);
	q_event(r);
	return 0;
}
