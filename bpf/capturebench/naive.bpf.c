// SPDX-License-Identifier: GPL-2.0
/*
 * naive.bpf.c - the "before" of the accumulating channel, for
 * `cistern bench capture`: the same uprobes/uretprobes on libssl as
 * tls.bpf.c, but every SSL_read/SSL_write fragment becomes one fixed 1 KiB
 * ring record (64-byte header with full metadata + up to 960 payload
 * bytes), reserved with bpf_ringbuf_reserve. Reserve failures are counted
 * (naive_stats), nothing is batched. The loader attaches with a pid filter
 * and sets the ring size.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64)
#define __TARGET_ARCH_x86
#endif
#include <bpf/bpf_tracing.h>
#include "cistern/taskstack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define NAIVE_REC 1024
#define NAIVE_HDR 64
#define NAIVE_DATA (NAIVE_REC - NAIVE_HDR)

struct naive_rec {
	__u64 ts;
	__u64 pidtid;
	__u64 uidgid;
	__u64 ssl;
	__u32 len;    /* bytes the call moved */
	__u32 caplen; /* bytes copied to data */
	__u32 dir;    /* 0 write, 1 read */
	__u32 cpu;
	char comm[16];
	__u8 data[NAIVE_DATA];
};

enum naive_stat { NS_RECORDS, NS_RING_BYTES, NS_PAYLOAD_BYTES, NS_LOST_RECORDS, NS_LOST_BYTES, NS_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18); /* set by the loader */
} naive_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NS_MAX);
	__type(key, __u32);
	__type(value, __u64);
} naive_stats SEC(".maps");

struct naive_args {
	__u64 ssl;
	__u64 buf;
	__u64 nptr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct naive_args);
} naive_inflight SEC(".maps");

static __always_inline void naive_count(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&naive_stats, &k);

	if (p)
		*p += v;
}

static __always_inline __u64 naive_tkey(__u32 dir)
{
	return (__u32)bpf_get_current_pid_tgid() | ((__u64)dir << 63);
}

static __always_inline int naive_enter(__u32 dir, __u64 ssl, __u64 buf, __u64 nptr)
{
	struct naive_args a = { .ssl = ssl, .buf = buf, .nptr = nptr };
	__u64 k = naive_tkey(dir);

	bpf_map_update_elem(&naive_inflight, &k, &a, BPF_ANY);
	return 0;
}

static __always_inline int naive_exit(__u32 dir, long ret)
{
	__u64 k = naive_tkey(dir);
	struct naive_args *a = bpf_map_lookup_elem(&naive_inflight, &k);
	struct naive_rec *r;
	__u64 n;
	__u32 cap;

	if (!a)
		return 0;
	if (a->nptr) {
		if (ret != 1 || bpf_probe_read_user(&n, sizeof(n), (void *)a->nptr))
			goto out;
	} else {
		if (ret <= 0)
			goto out;
		n = ret;
	}
	if (!n || n > 0x7fffffff)
		goto out;
	naive_count(NS_PAYLOAD_BYTES, n);
	r = bpf_ringbuf_reserve(&naive_ring, sizeof(*r), 0);
	if (!r) {
		naive_count(NS_LOST_RECORDS, 1);
		naive_count(NS_LOST_BYTES, n);
		goto out;
	}
	r->ts = bpf_ktime_get_ns();
	r->pidtid = bpf_get_current_pid_tgid();
	r->uidgid = bpf_get_current_uid_gid();
	r->ssl = a->ssl;
	r->len = n;
	r->dir = dir;
	r->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	cap = n > NAIVE_DATA ? NAIVE_DATA : (__u32)n;
	if (bpf_probe_read_user(r->data, cap, (void *)a->buf))
		cap = 0;
	r->caplen = cap;
	bpf_ringbuf_submit(r, 0);
	naive_count(NS_RECORDS, 1);
	naive_count(NS_RING_BYTES, sizeof(*r) + 8);
out:
	bpf_map_delete_elem(&naive_inflight, &k);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(naive_ssl_write, void *ssl, const void *buf, int num)
{
	CISTERN_TASK_STACK(ctx);
	return naive_enter(0, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(naive_ssl_write_ret, int ret)
{
	CISTERN_TASK_STACK(ctx);
	return naive_exit(0, ret);
}

SEC("uprobe")
int BPF_KPROBE(naive_ssl_read, void *ssl, void *buf, int num)
{
	CISTERN_TASK_STACK(ctx);
	return naive_enter(1, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(naive_ssl_read_ret, int ret)
{
	CISTERN_TASK_STACK(ctx);
	return naive_exit(1, ret);
}

SEC("uprobe")
int BPF_KPROBE(naive_ssl_write_ex, void *ssl, const void *buf, __u64 num, __u64 *written)
{
	CISTERN_TASK_STACK(ctx);
	return naive_enter(0, (__u64)ssl, (__u64)buf, (__u64)written);
}

SEC("uprobe")
int BPF_KPROBE(naive_ssl_read_ex, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
	CISTERN_TASK_STACK(ctx);
	return naive_enter(1, (__u64)ssl, (__u64)buf, (__u64)readbytes);
}
