// SPDX-License-Identifier: GPL-2.0
/* tcp_state table: sock/inet_sock_set_state. Slots: 6 family, 7 sport,
 * 8 dport, 9 saddr (v4), 10 daddr (v4), 11 oldstate, 12 newstate,
 * 13-14 saddr_v6, 15-16 daddr_v6, 17 protocol. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "query.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("tracepoint/sock/inet_sock_set_state")
int q_tcp_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	__u64 *r = q_record();
	if (!r || !q_begin(r))
		return 0;
	r[6] = ctx->family;
	r[7] = ctx->sport;
	r[8] = ctx->dport;
	__u32 a4 = 0;
	bpf_probe_read_kernel(&a4, 4, ctx->saddr);
	r[9] = a4;
	bpf_probe_read_kernel(&a4, 4, ctx->daddr);
	r[10] = a4;
	r[11] = ctx->oldstate;
	r[12] = ctx->newstate;
	bpf_probe_read_kernel(&r[13], 16, ctx->saddr_v6);
	bpf_probe_read_kernel(&r[15], 16, ctx->daddr_v6);
	r[17] = ctx->protocol;
	q_event(r);
	return 0;
}
