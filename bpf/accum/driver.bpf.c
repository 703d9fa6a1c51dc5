// SPDX-License-Identifier: GPL-2.0
/*
 * driver.bpf.c - the accumulating channel driven from user space through
 * CISTERN_CALL programs (XDP run with BPF_PROG_TEST_RUN, see
 * cistern/call.bpf.h), for package accum's tests and benchmarks: drv_write
 * feeds bytes [off, off+len) of the staging buffer to accum_write as one
 * fragment, drv_close closes a connection, drv_flush_aged runs the
 * latency-bound sweep now. accum_start (from the header) arms the real
 * timer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "cistern/accum.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Fragment source; value_size set by the loader (default 64 KiB). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 1 << 16);
} accum_staging SEC(".maps");

/* Where the staging address becomes a plain number: accum_write reads its
 * source with bpf_probe_read_kernel, as it would read a user buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drv_addr SEC(".maps");

CISTERN_CALL(drv_write, struct accum_drv_args, a)
{
	__u32 k = 0;
	__u8 *buf = bpf_map_lookup_elem(&accum_staging, &k);
	__u64 *slot = bpf_map_lookup_elem(&drv_addr, &k);

	if (!buf || !slot) {
		a->ret = -ACCUM_EINVAL;
		return;
	}
	*slot = (__u64)buf;
	a->ret = accum_write(a->conn_id, *(volatile __u64 *)slot + a->off, a->len,
			     ACCUM_PIDTID(a->pid, a->tid), ACCUM_META(a->dir, a->proto, 0));
}

CISTERN_CALL(drv_close, struct accum_drv_args, a)
{
	a->ret = accum_close(a->conn_id);
}

CISTERN_CALL(drv_flush_aged, struct accum_drv_args, a)
{
	a->ret = accum_flush_aged(a->max_age_ns);
}
