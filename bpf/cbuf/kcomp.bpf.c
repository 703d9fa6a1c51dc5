// SPDX-License-Identifier: GPL-2.0
/* The kernel as a CBUF component: on every exec this program takes a free
 * page of the mmapable array kpool (indexes the manager hands back through
 * the kfree queue), writes an exec record into it and "sends" it by putting
 * the index on the ksent ring buffer. User components receive it as a cbuf
 * and map kpool read-only. No free page: the event is counted in kdrops. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define KPAGES 64

struct kpage {
	char data[4096];
};

/* The record at the start of a page (cbuf/kcomp mirrors it). */
struct kexec {
	__u32 pid;
	__u32 len; /* bytes of filename, with its NUL */
	char comm[16];
	char filename[256];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KPAGES);
	__type(key, __u32);
	__type(value, struct kpage);
} kpool SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, KPAGES);
	__type(value, __u32);
} kfree SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096 * 4);
} ksent SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kdrops SEC(".maps");

SEC("tracepoint/sched/sched_process_exec")
int kcomp_exec(struct trace_event_raw_sched_process_exec *ctx)
{
	__u32 idx, zero = 0;
	if (bpf_map_pop_elem(&kfree, &idx)) {
		__u64 *d = bpf_map_lookup_elem(&kdrops, &zero);
		if (d)
			__sync_fetch_and_add(d, 1);
		return 0;
	}
	struct kpage *p = bpf_map_lookup_elem(&kpool, &idx);
	if (!p)
		return 0;
	struct kexec *r = (struct kexec *)p->data;
	r->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	unsigned off = ctx->__data_loc_filename & 0xffff;
	long n = bpf_probe_read_kernel_str(r->filename, sizeof(r->filename), (char *)ctx + off);
	r->len = n > 0 ? n : 0;
	if (bpf_ringbuf_output(&ksent, &idx, sizeof(idx), 0))
		bpf_map_push_elem(&kfree, &idx, 0); /* not sent: keep the page */
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
