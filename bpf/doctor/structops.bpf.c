// SPDX-License-Identifier: GPL-2.0
/*
 * structops.bpf.c - a do-nothing TCP congestion control, registered under a
 * unique name through a struct_ops link to prove struct_ops works. Kept apart
 * from probes.bpf.c so that a kernel refusing struct_ops hides nothing else.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("struct_ops")
__u32 BPF_PROG(probe_ssthresh, struct sock *sk)
{
	return 2;
}

SEC("struct_ops")
void BPF_PROG(probe_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
}

SEC("struct_ops")
__u32 BPF_PROG(probe_undo_cwnd, struct sock *sk)
{
	return 2;
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cistern_probe_cc = {
	.ssthresh = (void *)probe_ssthresh,
	.cong_avoid = (void *)probe_cong_avoid,
	.undo_cwnd = (void *)probe_undo_cwnd,
	.name = "cistern_probe",
};
