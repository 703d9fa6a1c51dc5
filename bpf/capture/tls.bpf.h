/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tls.bpf.h - libssl plaintext capture (part of capture.bpf.c).
 *
 * Uprobes and uretprobes on libssl's SSL_write / SSL_read (and the _ex
 * variants) remember the arguments per thread at entry; at return, the bytes
 * the call really moved (its return value, or *written / *readbytes for the
 * _ex forms) are fed from user memory to accum_write. A connection is the
 * pair (pid, SSL *): the first write or read gives it a connection id; SSL_free
 * closes it (accum_close) and forgets it. While a thread is inside one of
 * these calls or SSL_connect / SSL_accept / SSL_do_handshake, cap_in_tls
 * says so: plain.bpf.h marks the socket that call reads or writes as TLS
 * (and learns its addresses), so its ciphertext is never parsed as
 * plaintext. libssl calls are synchronous on one thread, so the tid is a
 * sound key.
 * The handlers use BPF_KPROBE/BPF_KRETPROBE: a uprobe gets the same pt_regs,
 * and the libbpf headers here predate BPF_UPROBE.
 */
#ifndef CISTERN_CAPTURE_TLS_BPF_H
#define CISTERN_CAPTURE_TLS_BPF_H

struct ssl_args {
	__u64 ssl;
	__u64 buf;
	__u64 nptr; /* _ex: size_t * of the bytes moved; 0 otherwise */
};

/* (pid, SSL *) -> connection id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct cap_obj_key);
	__type(value, __u64);
} ssl_conns SEC(".maps");

/* tid (direction in the top bit) -> arguments of the SSL call in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct ssl_args);
} ssl_inflight SEC(".maps");

/* The connection id of a TLS object (SSL * or *tls.Conn) in map m; a new
 * one, with its info, the first time. */
static __always_inline __u64 cap_tls_conn_id(void *m, __u32 pid, __u64 obj, __u8 library)
{
	struct cap_obj_key k = { .pid = pid, .obj = obj };
	__u64 *id = bpf_map_lookup_elem(m, &k), nid;

	if (id)
		return *id;
	nid = cap_new_id();
	if (!nid)
		return 0;
	/* The socket is known if a syscall in a TLS call of obj has been seen
	 * (the handshake's, usually). */
	cap_set_info(nid, CAP_TR_TLS, library, bpf_map_lookup_elem(&cap_tls_sock, &k));
	if (bpf_map_update_elem(m, &k, &nid, BPF_NOEXIST))
		return 0;
	id = bpf_map_lookup_elem(m, &k);
	return id ? *id : 0;
}

static long ssl_gone_cb(void *map, struct cap_obj_key *k, __u64 *id, __u32 *tgid)
{
	if (k->pid == *tgid) {
		accum_close(*id);
		bpf_map_delete_elem(map, k);
	}
	return 0;
}

static __always_inline void cap_tls_enter(__u64 obj, __u8 library)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid, tgid = pidtid >> 32;
	struct cap_tls_call in = { .key = obj, .library = library };
	__u8 one = 1;

	bpf_map_update_elem(&cap_in_tls, &tid, &in, BPF_ANY);
	if (!bpf_map_lookup_elem(&cap_tls_procs, &tgid))
		bpf_map_update_elem(&cap_tls_procs, &tgid, &one, BPF_ANY);
}

static __always_inline void cap_tls_leave(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&cap_in_tls, &tid);
}

/* A libssl call ends: one that made no socket syscall is remembered as the
 * thread's last (cap_last_tls, conn.bpf.h). */
static __always_inline void cap_ssl_leave(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cap_tls_call *in = bpf_map_lookup_elem(&cap_in_tls, &tid);

	if (in && !in->sock)
		bpf_map_update_elem(&cap_last_tls, &tid, in, BPF_ANY);
	bpf_map_delete_elem(&cap_in_tls, &tid);
}

/* Which library the probe is on: its attach cookie (capture/attach.go sets
 * CAP_LIB_* per file); 0, a probe attached without one, is libssl. */
static __always_inline __u8 cap_ssl_lib(void *ctx)
{
	__u64 c = bpf_get_attach_cookie(ctx);

	return c ? (__u8)c : CAP_LIB_OPENSSL;
}

/* The key of the in-flight map: tid, with the direction in the top bit. */
static __always_inline __u64 ssl_tkey(__u32 dir)
{
	return (__u32)bpf_get_current_pid_tgid() | ((__u64)dir << 63);
}

static __always_inline int ssl_enter(void *ctx, __u32 dir, __u64 ssl, __u64 buf, __u64 nptr)
{
	struct ssl_args a = { .ssl = ssl, .buf = buf, .nptr = nptr };
	__u64 k = ssl_tkey(dir);

	CISTERN_TASK_STACK(ctx);
	if (!cap_selected(bpf_get_current_pid_tgid() >> 32))
		return 0;
	cap_tls_enter(ssl, cap_ssl_lib(ctx));
	bpf_map_update_elem(&ssl_inflight, &k, &a, BPF_ANY);
	return 0;
}

static __always_inline int ssl_exit(void *ctx, __u32 dir, long ret)
{
	__u64 k = ssl_tkey(dir), pidtid = bpf_get_current_pid_tgid(), id;
	struct ssl_args *a = bpf_map_lookup_elem(&ssl_inflight, &k);
	__u64 n;

	CISTERN_TASK_STACK(ctx);
	if (!a)
		return 0;
	cap_ssl_leave();
	if (!cap_want_tls)
		goto out;
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
	id = cap_tls_conn_id(&ssl_conns, pidtid >> 32, a->ssl, cap_ssl_lib(ctx));
	if (id)
		accum_write(id, a->buf, (__u32)n, ACCUM_PIDTID(pidtid >> 32, (__u32)pidtid),
			    ACCUM_META(dir, cap_proto, 1));
out:
	bpf_map_delete_elem(&ssl_inflight, &k);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_write, void *ssl, const void *buf, int num)
{
	return ssl_enter(ctx, ACCUM_DIR_WRITE, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(cap_ssl_write_ret, int ret)
{
	return ssl_exit(ctx, ACCUM_DIR_WRITE, ret);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_read, void *ssl, void *buf, int num)
{
	return ssl_enter(ctx, ACCUM_DIR_READ, (__u64)ssl, (__u64)buf, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(cap_ssl_read_ret, int ret)
{
	return ssl_exit(ctx, ACCUM_DIR_READ, ret);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_write_ex, void *ssl, const void *buf, __u64 num, __u64 *written)
{
	return ssl_enter(ctx, ACCUM_DIR_WRITE, (__u64)ssl, (__u64)buf, (__u64)written);
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_read_ex, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
	return ssl_enter(ctx, ACCUM_DIR_READ, (__u64)ssl, (__u64)buf, (__u64)readbytes);
}

/* SSL_connect, SSL_accept, SSL_do_handshake: the handshake's socket I/O. */
SEC("uprobe")
int BPF_KPROBE(cap_ssl_handshake, void *ssl)
{
	CISTERN_TASK_STACK(ctx);
	if (cap_selected(bpf_get_current_pid_tgid() >> 32))
		cap_tls_enter((__u64)ssl, cap_ssl_lib(ctx));
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(cap_ssl_handshake_ret, int ret)
{
	CISTERN_TASK_STACK(ctx);
	cap_ssl_leave();
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(cap_ssl_free, void *ssl)
{
	struct cap_obj_key k = { .pid = bpf_get_current_pid_tgid() >> 32, .obj = (__u64)ssl };
	__u64 *id = bpf_map_lookup_elem(&ssl_conns, &k);

	CISTERN_TASK_STACK(ctx);
	bpf_map_delete_elem(&cap_tls_sock, &k);
	if (!id)
		return 0;
	accum_close(*id);
	bpf_map_delete_elem(&ssl_conns, &k);
	return 0;
}

#endif
