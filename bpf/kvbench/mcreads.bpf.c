// SPDX-License-Identifier: GPL-2.0
// Counts one process's read(2) calls and those that returned EAGAIN, for
// `cistern bench kv`'s TCP rows: memcached woken for a segment the kernel
// already answered reads nothing, and on a connection whose answered
// segment stays counted as unread it loops on EAGAIN (docs/kerby-kv.md).
// A tracepoint (no kprobe or fentry: this machine's kernel refuses them).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// The process (tgid) whose reads are counted; set before loading.
const volatile __u32 target_tgid = 0;

enum { MC_READS, MC_EAGAIN, MC_NR };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MC_NR);
	__type(key, __u32);
	__type(value, __u64);
} mc_counts SEC(".maps");

// syscalls/sys_exit_read's format: the common fields, the syscall number,
// the return value (stable across kernels: /sys/kernel/tracing/events/
// syscalls/sys_exit_read/format).
struct exit_read {
	__u64 common;
	__s32 nr;
	__s32 pad;
	__s64 ret;
};

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&mc_counts, &i);

	if (v)
		(*v)++;
}

SEC("tracepoint/syscalls/sys_exit_read")
int mc_read_exit(struct exit_read *ctx)
{
	if ((__u32)(bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	count(MC_READS);
	if (ctx->ret == -11 /* EAGAIN */)
		count(MC_EAGAIN);
	return 0;
}
