// SPDX-License-Identifier: GPL-2.0
/*
 * execlog.bpf.c - a minimal Kerby pool user outside Kerby-KV: on every exec,
 * store the new program's file name (variable length) as a pool object keyed
 * by the process id. examples/execlog loads it and reads the names back.
 *
 * tp_btf, not tracepoint: pool_obj_write() takes a bpf_spin_lock, which the
 * verifier refuses in kprobe/tracepoint/perf_event/raw_tp programs but
 * allows in BTF-enabled tracing programs (tp_btf) and XDP (execlog_read).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define CISTERN_POOL_OBJECTS
#include "cistern/pool.bpf.h"
#include "cistern/call.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The file name being stored, per CPU. Every map named pool_staging* is
 * sized by pool.Config.Apply to hold the largest object. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 128 * CISTERN_POOL_MAX_BLOCKS);
} pool_staging_cpu SEC(".maps");

/* Where execlog_read leaves a name for user space (one reader at a time). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 128 * CISTERN_POOL_MAX_BLOCKS);
} pool_staging SEC(".maps");

__u64 execs_stored, execs_failed;

SEC("tp_btf/sched_process_exec")
int BPF_PROG(execlog_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 k = 0;
	__u8 *buf = bpf_map_lookup_elem(&pool_staging_cpu, &k);
	long n;

	if (!buf)
		return 0;
	/* Names longer than the pool's largest object are cut to fit. */
	n = bpf_probe_read_kernel_str(buf, pool_max_len(), bprm->filename);
	if (n <= 0)
		return 0;
	if (pool_obj_write(p->tgid, buf, n - 1) == 0) /* without the NUL */
		__sync_fetch_and_add(&execs_stored, 1);
	else
		__sync_fetch_and_add(&execs_failed, 1);
	return 0;
}

/* Called from user space (kernel.Call): the name of process a->id. */
CISTERN_CALL(execlog_read, struct pool_op_args, a)
{
	__u32 k = 0;
	__u8 *buf = bpf_map_lookup_elem(&pool_staging, &k);

	a->ret = buf ? pool_obj_read(a->id, buf) : -POOL_EINVAL;
}
