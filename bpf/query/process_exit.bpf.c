// SPDX-License-Identifier: GPL-2.0
/* process_exit table. Slots: 6 prio, 7 group_dead, 8 exit_code. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Until 6.12 sched_process_exit shared sched_process_template's record
 * (comm, pid, prio); newer kernels (6.18 here) give it its own record with
 * group_dead. CO-RE keeps the branch the running kernel has. */
struct trace_event_raw_sched_process_template___q {
	struct trace_entry ent;
	char comm[16];
	pid_t pid;
	int prio;
} __attribute__((preserve_access_index));

SEC("tracepoint/sched/sched_process_exit")
int q_process_exit(void *ctx)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	__u64 *r = q_record();

	if (!r || !q_begin(r))
		return 0;
	if (bpf_core_field_exists(struct trace_event_raw_sched_process_exit, group_dead)) {
		struct trace_event_raw_sched_process_exit *e = ctx;

		r[6] = e->prio;
		r[7] = e->group_dead;
	} else {
		struct trace_event_raw_sched_process_template___q *e = ctx;

		r[6] = e->prio;
		/* do_exit() decrements signal->live before the tracepoint:
		 * 0 once the last thread of the process is exiting. */
		r[7] = BPF_CORE_READ(t, signal, live.counter) == 0;
	}
	r[8] = BPF_CORE_READ(t, exit_code);
	q_event(r);
	return 0;
}
