// SPDX-License-Identifier: GPL-2.0
/*
 * plain.bpf.c - plaintext socket capture through the accumulating channel.
 *
 * Tracepoints on syscalls/sys_enter_* and sys_exit_* of write, read, sendto,
 * recvfrom, sendmsg and recvmsg. At entry, a call of a captured process
 * (select.bpf.h: the same selection as the TLS uprobes) is kept only if its fd is an AF_INET/AF_INET6 stream or datagram socket:
 * task->files->fdt->fd[fd] -> file, whose inode is S_IFSOCK (so
 * private_data is a struct socket), -> sk family and type. The buffer (or
 * the msghdr) is remembered per thread; at exit the bytes the call returned
 * are fed from user memory to accum_write.
 *
 * A connection is (tgid, fd, struct file *): (tgid, fd) maps to a connection
 * id from a counter together with the file it was seen on. close() sends
 * ACCUM_F_CLOSE and forgets it; if the fd turns up bound to another file
 * (reused after a close we missed, dup2 onto it) the old stream is closed
 * and a new id starts, so fd reuse never continues an old stream.
 *
 * sendmsg/recvmsg: up to CAP_MAX_IOV iovecs are copied; bytes beyond them
 * are counted as lost and break the connection's sequence (never silent).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
/* bpf_tracing.h (BPF_PROG in select.bpf.h) wants the architecture. */
#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64)
#define __TARGET_ARCH_x86
#endif
#include <bpf/bpf_tracing.h>

#include "cistern/accum.bpf.h"
#include "select.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u8 cap_proto = 1; /* protocol tag of the records */

#define CAP_AF_INET 2
#define CAP_AF_INET6 10
#define CAP_SOCK_STREAM 1
#define CAP_SOCK_DGRAM 2
#define CAP_S_IFMT 0170000
#define CAP_S_IFSOCK 0140000
#define CAP_MAX_IOV 8

struct cap_key {
	__u32 pid;
	__u32 fd;
};

struct cap_val {
	__u64 id;
	__u64 file;
};

struct cap_args {
	__u64 buf;  /* buffer, or struct user_msghdr * when msg */
	__u64 file;
	__u32 fd;
	__u8 dir;
	__u8 msg;
	__u8 pad[2];
};

/* (tgid, fd) -> connection id and the file it belongs to. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cap_key);
	__type(value, struct cap_val);
} cap_fds SEC(".maps");

/* tid -> the socket call in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct cap_args);
} cap_inflight SEC(".maps");

/* [0]: last connection id handed out. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_next_id SEC(".maps");

static long cap_gone_cb(void *map, struct cap_key *k, struct cap_val *v, __u32 *tgid)
{
	if (k->pid == *tgid) {
		accum_close(v->id);
		bpf_map_delete_elem(map, k);
	}
	return 0;
}

static void cap_proc_gone(__u32 tgid)
{
	bpf_for_each_map_elem(&cap_fds, cap_gone_cb, &tgid, 0);
}

/* The struct file of fd if it is an internet TCP/UDP socket, else 0. */
static __always_inline __u64 cap_inet_file(__u32 fd)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	struct file **fds, *f = 0;
	struct socket *sock;
	struct sock *sk;
	__u16 mode, family, type;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	mode = BPF_CORE_READ(f, f_inode, i_mode);
	if ((mode & CAP_S_IFMT) != CAP_S_IFSOCK)
		return 0;
	sock = (struct socket *)BPF_CORE_READ(f, private_data);
	if (!sock)
		return 0;
	sk = BPF_CORE_READ(sock, sk);
	if (!sk)
		return 0;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	type = BPF_CORE_READ(sk, sk_type);
	if (family != CAP_AF_INET && family != CAP_AF_INET6)
		return 0;
	if (type != CAP_SOCK_STREAM && type != CAP_SOCK_DGRAM)
		return 0;
	return (__u64)f;
}

/* The connection id of (tgid, fd) on file; a new one if the fd is new or
 * now names another file (the old stream is closed first). */
static __always_inline __u64 cap_conn_id(__u32 pid, __u32 fd, __u64 file)
{
	struct cap_key k = { .pid = pid, .fd = fd };
	struct cap_val *v = bpf_map_lookup_elem(&cap_fds, &k), nv = { .file = file };
	__u32 zk = 0;
	__u64 *next;

	if (v) {
		if (v->file == file)
			return v->id;
		accum_close(v->id);
		bpf_map_delete_elem(&cap_fds, &k);
	}
	next = bpf_map_lookup_elem(&cap_next_id, &zk);
	if (!next)
		return 0;
	nv.id = __sync_fetch_and_add(next, 1) + 1;
	bpf_map_update_elem(&cap_fds, &k, &nv, BPF_NOEXIST);
	v = bpf_map_lookup_elem(&cap_fds, &k);
	return v ? v->id : 0;
}

static __always_inline int cap_enter(__u64 fd, __u64 buf, __u32 dir, __u32 msg)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid;
	struct cap_args a = { .buf = buf, .fd = (__u32)fd, .dir = dir, .msg = msg };

	if (fd > 0x7fffffff || !cap_selected(pidtid >> 32))
		return 0;
	a.file = cap_inet_file((__u32)fd);
	if (!a.file)
		return 0;
	bpf_map_update_elem(&cap_inflight, &tid, &a, BPF_ANY);
	return 0;
}

/* Bytes a msghdr's iovecs did not carry to the channel: counted, and the
 * connection's sequence broken so the reader sees the gap. */
static __always_inline void cap_lose(__u64 id, __u64 n)
{
	struct accum_conn *c = bpf_map_lookup_elem(&accum_conns, &id);

	accum_stat_add(ACCUM_STAT_LOST_BYTES, n);
	if (c)
		__sync_fetch_and_add(&c->next_seq, 1);
}

static __always_inline int cap_exit(long ret)
{
	__u64 pidtid = bpf_get_current_pid_tgid(), id, left;
	__u32 tid = (__u32)pidtid, pid = pidtid >> 32;
	struct cap_args *a;
	struct user_msghdr mh;
	struct iovec iov;
	__u32 meta;

	a = bpf_map_lookup_elem(&cap_inflight, &tid);
	if (!a)
		return 0;
	if (ret <= 0 || ret > 0x7fffffff)
		goto out;
	id = cap_conn_id(pid, a->fd, a->file);
	if (!id)
		goto out;
	meta = ACCUM_META(a->dir, cap_proto, 1);
	if (!a->msg) {
		accum_write(id, a->buf, (__u32)ret, ACCUM_PIDTID(pid, tid), meta);
		goto out;
	}
	left = ret;
	if (bpf_probe_read_user(&mh, sizeof(mh), (void *)a->buf)) {
		accum_stat_add(ACCUM_STAT_FAULTS, 1);
		cap_lose(id, left);
		goto out;
	}
	for (int i = 0; i < CAP_MAX_IOV && left; i++) {
		__u64 n;

		if (i >= mh.msg_iovlen)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), &mh.msg_iov[i])) {
			accum_stat_add(ACCUM_STAT_FAULTS, 1);
			break;
		}
		n = iov.iov_len < left ? iov.iov_len : left;
		if (n)
			accum_write(id, (__u64)iov.iov_base, (__u32)n, ACCUM_PIDTID(pid, tid), meta);
		left -= n;
	}
	if (left)
		cap_lose(id, left);
out:
	bpf_map_delete_elem(&cap_inflight, &tid);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_write")
int cap_enter_write(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, 0);
}

SEC("tracepoint/syscalls/sys_enter_sendto")
int cap_enter_sendto(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, 0);
}

SEC("tracepoint/syscalls/sys_enter_sendmsg")
int cap_enter_sendmsg(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, 1);
}

SEC("tracepoint/syscalls/sys_enter_read")
int cap_enter_read(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, 0);
}

SEC("tracepoint/syscalls/sys_enter_recvfrom")
int cap_enter_recvfrom(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, 0);
}

SEC("tracepoint/syscalls/sys_enter_recvmsg")
int cap_enter_recvmsg(struct trace_event_raw_sys_enter *ctx)
{
	return cap_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, 1);
}

/* One exit program serves every call: the in-flight entry says which. */
SEC("tracepoint/syscalls/sys_exit_write")
int cap_exit_io(struct trace_event_raw_sys_exit *ctx)
{
	return cap_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_close")
int cap_close(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	struct cap_key k = { .pid = pidtid >> 32, .fd = (__u32)ctx->args[0] };
	struct cap_val *v;

	v = bpf_map_lookup_elem(&cap_fds, &k);
	if (!v)
		return 0;
	accum_close(v->id);
	bpf_map_delete_elem(&cap_fds, &k);
	return 0;
}
