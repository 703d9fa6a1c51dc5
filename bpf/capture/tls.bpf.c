// SPDX-License-Identifier: GPL-2.0
/*
 * tls.bpf.c - TLS plaintext capture through the accumulating channel.
 *
 * Uprobes and uretprobes on libssl's SSL_write / SSL_read (and the _ex
 * variants) remember the arguments per thread at entry; at return, the bytes
 * the call really moved (its return value, or *written / *readbytes for the
 * _ex forms) are fed from user memory to accum_write. A connection is the
 * pair (pid, SSL *): the first write or read gives it a connection id from
 * a counter; SSL_free closes it (accum_close) and forgets it. The loader
 * attaches with a pid filter (one process) or to every process using the
 * library, and then select.bpf.h says which calls count; cap_proto (frozen
 * .rodata) tags the records.
 * The handlers use BPF_KPROBE/BPF_KRETPROBE: a uprobe gets the same pt_regs,
 * and the libbpf headers here predate BPF_UPROBE.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
/* PT_REGS_* need the architecture; this tree builds for x86-64 (bpfel). */
#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64)
#define __TARGET_ARCH_x86
#endif
#include <bpf/bpf_tracing.h>

#include "cistern/accum.bpf.h"
#include "select.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u8 cap_proto = 1; /* protocol tag of the records */

struct cap_key {
	__u32 pid;
	__u32 pad;
	__u64 ssl;
};

struct cap_args {
	__u64 ssl;
	__u64 buf;
	__u64 nptr; /* _ex: size_t * of the bytes moved; 0 otherwise */
};

/* (pid, SSL *) -> connection id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cap_key);
	__type(value, __u64);
} cap_conns SEC(".maps");

/* tid -> arguments of the SSL call in flight, per direction. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct cap_args);
} cap_inflight SEC(".maps");

/* [0]: last connection id handed out. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_next_id SEC(".maps");

static __always_inline __u64 cap_conn_id(__u32 pid, __u64 ssl)
{
	struct cap_key k = { .pid = pid, .ssl = ssl };
	__u64 *id = bpf_map_lookup_elem(&cap_conns, &k), nid;
	__u32 zk = 0;
	__u64 *next;

	if (id)
		return *id;
	next = bpf_map_lookup_elem(&cap_next_id, &zk);
	if (!next)
		return 0;
	nid = __sync_fetch_and_add(next, 1) + 1;
	bpf_map_update_elem(&cap_conns, &k, &nid, BPF_NOEXIST);
	id = bpf_map_lookup_elem(&cap_conns, &k);
	return id ? *id : 0;
}

static long cap_gone_cb(void *map, struct cap_key *k, __u64 *id, __u32 *tgid)
{
	if (k->pid == *tgid) {
		accum_close(*id);
		bpf_map_delete_elem(map, k);
	}
	return 0;
}

static void cap_proc_gone(__u32 tgid)
{
	bpf_for_each_map_elem(&cap_conns, cap_gone_cb, &tgid, 0);
}

/* The key of the in-flight map: tid, with the direction in the top bit. */
static __always_inline __u64 cap_tkey(__u32 dir)
{
	return (__u32)bpf_get_current_pid_tgid() | ((__u64)dir << 63);
}

static __always_inline int cap_enter(__u32 dir, __u64 ssl, __u64 buf, __u64 nptr)
{
	struct cap_args a = { .ssl = ssl, .buf = buf, .nptr = nptr };
	__u64 k = cap_tkey(dir);

	if (!cap_selected(bpf_get_current_pid_tgid() >> 32))
		return 0;
	bpf_map_update_elem(&cap_inflight, &k, &a, BPF_ANY);
	return 0;
}

static __always_inline int cap_exit(__u32 dir, long ret)
{
	__u64 k = cap_tkey(dir), pidtid = bpf_get_current_pid_tgid(), id;
	struct cap_args *a = bpf_map_lookup_elem(&cap_inflight, &k);
	__u64 n;

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
	id = cap_conn_id(pidtid >> 32, a->ssl);
	if (id)
		accum_write(id, a->buf, (__u32)n, ACCUM_PIDTID(pidtid >> 32, (__u32)pidtid),
			    ACCUM_META(dir, cap_proto, 1));
out:
	bpf_map_delete_elem(&cap_inflight, &k);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_write, void *ssl, const void *buf, int num)
{
	return cap_enter(ACCUM_DIR_WRITE, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(cap_ssl_write_ret, int ret)
{
	return cap_exit(ACCUM_DIR_WRITE, ret);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_read, void *ssl, void *buf, int num)
{
	return cap_enter(ACCUM_DIR_READ, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(cap_ssl_read_ret, int ret)
{
	return cap_exit(ACCUM_DIR_READ, ret);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_write_ex, void *ssl, const void *buf, __u64 num, __u64 *written)
{
	return cap_enter(ACCUM_DIR_WRITE, (__u64)ssl, (__u64)buf, (__u64)written);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_read_ex, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
	return cap_enter(ACCUM_DIR_READ, (__u64)ssl, (__u64)buf, (__u64)readbytes);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_free, void *ssl)
{
	struct cap_key k = { .pid = bpf_get_current_pid_tgid() >> 32, .ssl = (__u64)ssl };
	__u64 *id = bpf_map_lookup_elem(&cap_conns, &k);

	if (!id)
		return 0;
	accum_close(*id);
	bpf_map_delete_elem(&cap_conns, &k);
	return 0;
}
