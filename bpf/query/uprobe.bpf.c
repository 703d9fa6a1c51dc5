// SPDX-License-Identifier: GPL-2.0
/* uprobe('bin','sym') table: uprobe/uretprobe joined per thread.
 * Slots: 7-12 arg0-5, 13 ret, 14 exit_ns, 15 latency_ns (x86-64 ABI).
 *
 * The record lives on the task's stack, not in q_scratch: a uprobe runs
 * with preemption enabled, and on a preemptible kernel (sid's 7.x) a task
 * preempted here would share the per-CPU scratch record with the next run
 * on its CPU (the other tables' tracepoints run with preemption off).
 * CISTERN_TASK_STACK keeps that stack the task's own. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"
#include "cistern/taskstack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int q_uprobe_enter(struct pt_regs *ctx)
{
	__u64 r[Q_NSLOT] = {};

	CISTERN_TASK_STACK(ctx);
	if (!q_begin_at(r))
		return 0;
	r[6] = 0;
	r[7] = ctx->di;
	r[8] = ctx->si;
	r[9] = ctx->dx;
	r[10] = ctx->cx;
	r[11] = ctx->r8;
	r[12] = ctx->r9;
	r[13] = r[14] = r[15] = 0;
	r[Q_JKEY] = r[2];
	q_enter(r);
	return 0;
}

SEC("uretprobe")
int q_uprobe_exit(struct pt_regs *ctx)
{
	__u64 r[Q_NSLOT] = {};

	CISTERN_TASK_STACK(ctx);
	if (q_join) {
		struct q_saved *e = q_take((__u32)bpf_get_current_pid_tgid());
		if (!e)
			return 0;
		__u64 now = bpf_ktime_get_ns();
		q_restore(r, e, 13);
		e->s[0] = 0;
		r[13] = ctx->ax;
		r[14] = now;
		r[15] = now - r[0];
		q_event(r);
		return 0;
	}
	if (!q_begin(r))
		return 0;
	r[6] = 0;
	r[13] = ctx->ax;
	r[14] = r[0];
	r[Q_JKEY] = r[2];
	q_exit_lookup(r);
	return 0;
}
