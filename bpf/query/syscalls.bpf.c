// SPDX-License-Identifier: GPL-2.0
/* syscalls table: raw_syscalls sys_enter/sys_exit, joined per thread.
 * Slots: 6 nr, 7-12 arg0-5, 13 ret, 14 exit_ns, 15 latency_ns. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/raw_syscalls/sys_enter")
int q_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin_at(r))
		return 0;
	r[6] = ctx->id;
	/* one load each: a computed ctx pointer is refused */
	r[7] = ctx->args[0];
	r[8] = ctx->args[1];
	r[9] = ctx->args[2];
	r[10] = ctx->args[3];
	r[11] = ctx->args[4];
	r[12] = ctx->args[5];
	r[13] = r[14] = r[15] = 0;
	r[Q_JKEY] = r[2];
	q_enter(r);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int q_sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 *r = q_record();
	if (!r)
		return 0;
	if (q_join) {
		/* kernel join: everything but ret and the exit time comes from
		 * the entry half, so no helper runs unless the entry matched */
		__u64 pt = bpf_get_current_pid_tgid();
		__u64 key = (__u32)pt;
		struct q_saved *e = bpf_map_lookup_elem(&q_inflight, &key);
		if (!e)
			return 0;
		__u64 now = bpf_ktime_get_ns();
#pragma unroll
		for (int i = 0; i < 13; i++)
			r[i] = e->s[i];
		bpf_map_delete_elem(&q_inflight, &key);
		r[13] = ctx->ret;
		r[14] = now;
		r[15] = now - r[0];
		q_event(r);
		return 0;
	}
	if (!q_begin(r))
		return 0;
	r[6] = ctx->id;
	r[13] = ctx->ret;
	r[14] = r[0];
	r[Q_JKEY] = r[2];
	q_exit_lookup(r);
	return 0;
}
