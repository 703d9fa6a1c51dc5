// SPDX-License-Identifier: GPL-2.0
/* syscalls table: raw_syscalls sys_enter/sys_exit as raw tracepoints (the
 * kernel does not format a trace record for them, unlike the tracepoint),
 * joined per thread. Slots: 6 nr, 7-12 arg0-5, 13 ret, 14 exit_ns,
 * 15 latency_ns.
 *
 * The record is on the program's stack, not in q_scratch: from 7.x the
 * syscall tracepoints run with preemption on, so a task preempted inside
 * q_sys_enter would share the per-CPU scratch record with q_sys_exit (or
 * another table's program) run by the next task on its CPU. Two runs of one
 * raw-tracepoint program never interleave on a CPU (the kernel skips the
 * second and counts it), so even the per-CPU private stack the verifier may
 * give these programs from 6.13 is one run's own. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* x86_64 pt_regs from r10 to di: r10 r9 r8 ax cx dx si di (the ptrace ABI
 * layout), so the six arguments are one probe read. */
struct q_argspan {
	__u64 r10, r9, r8, ax, cx, dx, si, di;
};

SEC("raw_tp/sys_enter")
int q_sys_enter(__u64 *ctx)
{
	__u64 r[Q_NSLOT] = {};

	if (q_foreign())
		return 0;
	if (!q_begin_at(r))
		return 0;
	r[6] = ctx[1];
	if (q_need_args) {
		struct pt_regs *regs = (struct pt_regs *)ctx[0];
		struct q_argspan a = {};
		bpf_core_read(&a, sizeof(a), &regs->r10);
		r[7] = a.di;
		r[8] = a.si;
		r[9] = a.dx;
		r[10] = a.r10;
		r[11] = a.r8;
		r[12] = a.r9;
	} else {
		r[7] = r[8] = r[9] = r[10] = r[11] = r[12] = 0;
	}
	r[13] = r[14] = r[15] = 0;
	r[Q_JKEY] = r[2];
	q_enter(r);
	return 0;
}

SEC("raw_tp/sys_exit")
int q_sys_exit(__u64 *ctx)
{
	__u64 r[Q_NSLOT] = {};

	if (q_foreign())
		return 0;
	if (q_join) {
		/* kernel join: everything but ret and the exit time comes from
		 * the entry half, so no helper runs unless the entry matched */
		struct q_saved *e = q_take((__u32)bpf_get_current_pid_tgid());
		if (!e)
			return 0;
		__u64 now = bpf_ktime_get_ns();
		q_restore(r, e, 13);
		e->s[0] = 0;
		r[13] = ctx[1];
		r[14] = now;
		r[15] = now - r[0];
		q_event(r);
		return 0;
	}
	if (!q_begin(r))
		return 0;
	/* the raw exit hook carries no number: orig_ax holds it */
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	r[6] = q_emit != Q_EMIT_NONE ? BPF_CORE_READ(regs, orig_ax) : 0;
	r[13] = ctx[1];
	r[14] = r[0];
	r[Q_JKEY] = r[2];
	q_exit_lookup(r);
	return 0;
}
