/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gotls.bpf.h - Go crypto/tls plaintext capture (part of capture.bpf.c).
 *
 * Go does not use libssl: uprobes go on crypto/tls.(*Conn).Write and
 * (*Conn).Read of each Go binary (capture/gotls.go finds them through the
 * symbol table or .gopclntab). Go's register ABI (1.17+, amd64) passes
 * the receiver in RAX and the []byte as RBX (pointer), RCX (length), RDI
 * (capacity); results come back in RAX (n) and RBX/RCX (error); R14 holds
 * the running goroutine (g).
 *  - Write: the buffer is fed at entry, its whole length (tls.Conn.Write
 *    writes all of it or fails).
 *  - Read: the entry remembers (pid, g) -> (conn, buf); uprobes at each RET
 *    instruction of the function (found by disassembly; uretprobes would
 *    rewrite the return address on a stack Go may move) read n from RAX.
 *    The key is the goroutine, not the thread: a Read waiting for data
 *    parks its goroutine, which may resume on another thread.
 *  - Close: (*Conn).Close ends the connection.
 *  - handshakeContext: inside a TLS call (cap_in_tls) from entry to RET,
 *    unless already inside this connection's Read or Write.
 * A connection is (pid, *tls.Conn). cap_in_tls marks the thread as inside
 * a Go TLS call (library go), so plain.bpf.h ties the socket it writes TLS
 * records to with the connection.
 */
#ifndef CISTERN_CAPTURE_GOTLS_BPF_H
#define CISTERN_CAPTURE_GOTLS_BPF_H

struct go_read_key {
	__u32 pid;
	__u32 pad;
	__u64 g;
};

struct go_read_args {
	__u64 conn;
	__u64 buf;
};

/* (pid, *tls.Conn) -> connection id. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct cap_obj_key);
	__type(value, __u64);
} go_conns SEC(".maps");

/* (pid, g) -> the Read in flight (LRU: a goroutine that never returns). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_read_key);
	__type(value, struct go_read_args);
} go_reads SEC(".maps");

SEC("uprobe")
int cap_go_write(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	__u64 pidtid = bpf_get_current_pid_tgid(), conn = ctx->ax, buf = ctx->bx, len = ctx->cx, id;
	__u32 pid = pidtid >> 32;

	if (!cap_selected(pid))
		return 0;
	cap_tls_enter(conn, CAP_LIB_GO);
	if (!cap_want_tls || !len || len > 0x7fffffff)
		return 0;
	id = cap_tls_conn_id(&go_conns, pid, conn, CAP_LIB_GO);
	if (id)
		accum_write(id, buf, (__u32)len, ACCUM_PIDTID(pid, (__u32)pidtid),
			    ACCUM_META(ACCUM_DIR_WRITE, cap_proto, 1));
	return 0;
}

/* At each RET of (*Conn).Write. */
SEC("uprobe")
int cap_go_write_ret(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	cap_tls_leave();
	return 0;
}

SEC("uprobe")
int cap_go_read(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct go_read_key k = { .pid = pid, .g = ctx->r14 };
	struct go_read_args a = { .conn = ctx->ax, .buf = ctx->bx };

	if (!cap_selected(pid))
		return 0;
	cap_tls_enter(a.conn, CAP_LIB_GO);
	bpf_map_update_elem(&go_reads, &k, &a, BPF_ANY);
	return 0;
}

/* At each RET of (*Conn).Read. */
SEC("uprobe")
int cap_go_read_ret(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	__u64 pidtid = bpf_get_current_pid_tgid(), n = ctx->ax, id;
	__u32 pid = pidtid >> 32;
	struct go_read_key k = { .pid = pid, .g = ctx->r14 };
	struct go_read_args *a = bpf_map_lookup_elem(&go_reads, &k);

	if (!a)
		return 0;
	cap_tls_leave();
	if (cap_want_tls && (__s64)n > 0 && n <= 0x7fffffff) {
		id = cap_tls_conn_id(&go_conns, pid, a->conn, CAP_LIB_GO);
		if (id)
			accum_write(id, a->buf, (__u32)n, ACCUM_PIDTID(pid, (__u32)pidtid),
				    ACCUM_META(ACCUM_DIR_READ, cap_proto, 1));
	}
	bpf_map_delete_elem(&go_reads, &k);
	return 0;
}

/* (*Conn).handshakeContext: its socket I/O is inside a TLS call (a program
 * may call Handshake() itself, before any Write). Read and Write call it
 * first, every time (it returns at once when the handshake is done): inside
 * one of them on the same connection it leaves their call in place, and
 * its RETs (cap_go_handshake_ret) end only a call it began. Ending theirs
 * left each Write's record write outside any call, and a connection whose
 * hello went out from another thread (its goroutine moved while making the
 * key shares) was never marked probed: reported unread though every query
 * was read. */
SEC("uprobe")
int cap_go_handshake(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid;
	struct cap_tls_call *in;

	if (!cap_selected(pidtid >> 32))
		return 0;
	in = bpf_map_lookup_elem(&cap_in_tls, &tid);
	if (in && in->key == ctx->ax && in->library == CAP_LIB_GO)
		return 0; /* inside this connection's Read or Write */
	cap_tls_enter(ctx->ax, CAP_LIB_GO);
	in = bpf_map_lookup_elem(&cap_in_tls, &tid);
	if (in)
		in->handshake = 1;
	return 0;
}

/* At each RET of (*Conn).handshakeContext. */
SEC("uprobe")
int cap_go_handshake_ret(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cap_tls_call *in = bpf_map_lookup_elem(&cap_in_tls, &tid);

	if (in && in->handshake)
		bpf_map_delete_elem(&cap_in_tls, &tid);
	return 0;
}

SEC("uprobe")
int cap_go_close(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	struct cap_obj_key k = { .pid = bpf_get_current_pid_tgid() >> 32, .obj = ctx->ax };
	__u64 *id = bpf_map_lookup_elem(&go_conns, &k);

	bpf_map_delete_elem(&cap_tls_sock, &k);
	if (!id)
		return 0;
	accum_close(*id);
	bpf_map_delete_elem(&go_conns, &k);
	return 0;
}

#endif
