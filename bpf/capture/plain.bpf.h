/* SPDX-License-Identifier: GPL-2.0 */
/*
 * plain.bpf.h - plaintext socket capture (part of capture.bpf.c).
 *
 * Tracepoints on syscalls/sys_enter_* and sys_exit_* of write, read, sendto,
 * recvfrom, sendmsg, recvmsg, writev and readv (libuv, so Node.js, writes
 * a corked stream's buffers with writev). At entry, a call of a captured process
 * (select.bpf.h: the same selection as the TLS uprobes) is kept only if its
 * fd is an AF_INET/AF_INET6 stream or datagram socket (conn.bpf.h) that is
 * not marked TLS. The buffer (or the msghdr) is remembered per thread; at
 * exit the bytes the call returned are fed from user memory to accum_write.
 *
 * TLS. A socket is marked TLS (cap_tls_fds) and skipped from then on when
 *  - the call is made from inside a libssl call (cap_in_tls: SSL_read,
 *    SSL_write, SSL_connect, SSL_accept, SSL_do_handshake), or is a write
 *    of a TLS record from inside Go's (*tls.Conn).Write or Read (a
 *    goroutine may move to another thread while it waits, so for Go the
 *    bytes must confirm it);
 *  - or a young stream (its first CAP_YOUNG bytes) carries a ClientHello or
 *    ServerHello: STARTTLS, as after PostgreSQL's SSLRequest, or a TLS
 *    stack without uprobes;
 *  - or the first bytes seen of a connection start a TLS record (one open
 *    before the capture, whose first TLS call the uprobes have not seen yet).
 * The plaintext stream the socket had before (the SSLRequest) is closed
 * then, so the parser drops it. The uprobes see the decrypted bytes.
 *
 * A connection is (tgid, fd, struct file *): (tgid, fd) maps to a connection
 * id together with the file it was seen on. close() sends ACCUM_F_CLOSE and
 * forgets it; if the fd turns up bound to another file (reused after a close
 * we missed, dup2 onto it) the old stream is closed and a new id starts, so
 * fd reuse never continues an old stream.
 *
 * sendmsg/recvmsg/writev/readv: up to CAP_MAX_IOV iovecs are copied; bytes beyond them
 * are counted as lost and break the connection's sequence (never silent).
 */
#ifndef CISTERN_CAPTURE_PLAIN_BPF_H
#define CISTERN_CAPTURE_PLAIN_BPF_H

#define CAP_MAX_IOV 8
#define CAP_YOUNG 1024 /* bytes of a stream in which a TLS hello means STARTTLS */

struct plain_val {
	__u64 id;
	__u64 file;
	__u64 bytes; /* carried so far */
};

#define PLAIN_BUF 0 /* plain_args.msg: buf is the buffer */
#define PLAIN_MSG 1 /* buf is a struct user_msghdr * */
#define PLAIN_IOV 2 /* buf is a struct iovec[niov] */

struct plain_args {
	__u64 buf;
	__u64 file;
	__u64 sk;
	__u32 fd;
	__u8 dir;
	__u8 msg;  /* PLAIN_* */
	__u8 tls;  /* a TLS socket no probe reads: only its bytes are counted */
	__u8 niov; /* PLAIN_IOV: iovecs (at most 255; CAP_MAX_IOV are copied) */
};

/* (tgid, fd) -> connection id and the file it belongs to. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct cap_fd_key);
	__type(value, struct plain_val);
} plain_fds SEC(".maps");

/* tid -> the socket call in flight. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct plain_args);
} plain_inflight SEC(".maps");

static long plain_gone_cb(void *map, struct cap_fd_key *k, struct plain_val *v, __u32 *tgid)
{
	if (k->pid == *tgid) {
		accum_close(v->id);
		bpf_map_delete_elem(map, k);
	}
	return 0;
}

/* The plaintext connection of (tgid, fd) on file; a new one if the fd is
 * new or now names another file (the old stream is closed first). */
static __always_inline struct plain_val *plain_conn(__u32 pid, __u32 fd, __u64 file, __u64 sk)
{
	struct cap_fd_key k = { .pid = pid, .fd = fd };
	struct plain_val *v = bpf_map_lookup_elem(&plain_fds, &k), nv = { .file = file };
	struct cap_addr a = {};

	if (v) {
		if (v->file == file)
			return v;
		accum_close(v->id);
		bpf_map_delete_elem(&plain_fds, &k);
	}
	nv.id = cap_new_id();
	if (!nv.id)
		return 0;
	cap_sock_addr(sk, &a);
	cap_set_info(nv.id, CAP_TR_PLAIN, CAP_LIB_NONE, &a);
	bpf_map_update_elem(&plain_fds, &k, &nv, BPF_NOEXIST);
	return bpf_map_lookup_elem(&plain_fds, &k);
}

/* The end of TLS socket k (close, exit, fd reused): one no probe read
 * from its first TLS byte is announced (CAP_EV_UNREAD), then forgotten. */
static __always_inline void cap_tls_gone(struct cap_fd_key *k, struct cap_tls_st *st)
{
	struct cap_ev *ev;

	if (cap_want_tls && (!(st->flags & CAP_TLS_PROBED) || (st->flags & (CAP_TLS_UNSEEN | CAP_TLS_MIDSTREAM)))) {
		ev = bpf_ringbuf_reserve(&cap_ctl, sizeof(*ev), 0);
		if (ev) {
			ev->type = CAP_EV_UNREAD;
			ev->held = 0;
			ev->flags = st->flags;
			ev->pid = k->pid;
			ev->ts = bpf_ktime_get_ns();
			__builtin_memset(&ev->f, 0, sizeof(ev->f));
			ev->fd = k->fd;
			ev->pad = 0;
			ev->bytes[0] = st->bytes[0];
			ev->bytes[1] = st->bytes[1];
			ev->a = st->a;
			__builtin_memcpy(ev->comm, st->comm, sizeof(ev->comm));
			ev->path[0] = 0;
			bpf_ringbuf_submit(ev, 0);
		} else {
			cap_ctl_count_lost();
		}
	}
	bpf_map_delete_elem(&cap_tls_fds, k);
}

static long tls_gone_cb(void *map, struct cap_fd_key *k, struct cap_tls_st *st, __u32 *tgid)
{
	if (k->pid == *tgid)
		cap_tls_gone(k, st);
	return 0;
}

/* Marks (pid, fd) on file as TLS and ends its plaintext stream; in (the
 * TLS call the thread is in, or NULL) learns the socket's addresses.
 * flags: CAP_TLS_PROBED when a probe is in a call on it (in, or a Go Read),
 * else CAP_TLS_UNSEEN (and CAP_TLS_MIDSTREAM when no hello was seen). */
static __always_inline void cap_mark_tls(__u32 pid, __u32 fd, __u64 file, __u64 sk,
					 struct cap_tls_call *in, __u32 flags)
{
	struct cap_fd_key fk = { .pid = pid, .fd = fd };
	struct cap_obj_key ok = { .pid = pid };
	struct plain_val *v;
	struct cap_tls_st *st = bpf_map_lookup_elem(&cap_tls_fds, &fk);
	struct cap_scratch *sc;
	struct cap_conn_info *info;
	__u64 *id;
	__u32 zk = 0;

	if (in) {
		ok.obj = in->key;
		flags |= CAP_TLS_PROBED;
	}
	if (st && st->file == file) {
		st->flags |= flags & CAP_TLS_PROBED;
		if (!in || bpf_map_lookup_elem(&cap_tls_sock, &ok))
			return; /* known */
	}
	sc = bpf_map_lookup_elem(&cap_scratch, &zk);
	if (!sc)
		return;
	cap_sock_addr(sk, &sc->a);
	if (!st || st->file != file) {
		if (st)
			cap_tls_gone(&fk, st); /* the fd was reused */
		sc->st.file = file;
		sc->st.bytes[0] = 0;
		sc->st.bytes[1] = 0;
		sc->st.flags = flags;
		sc->st.pad = 0;
		sc->st.a = sc->a;
		bpf_get_current_comm(sc->st.comm, sizeof(sc->st.comm));
		bpf_map_update_elem(&cap_tls_fds, &fk, &sc->st, BPF_ANY);
		v = bpf_map_lookup_elem(&plain_fds, &fk);
		if (v) {
			accum_close(v->id);
			bpf_map_delete_elem(&plain_fds, &fk);
		}
	}
	if (!in)
		return;
	bpf_map_update_elem(&cap_tls_sock, &ok, &sc->a, BPF_ANY);
	/* A TLS connection that already has records (a Go server reads before
	 * it writes) gets its addresses now. */
	if (in->library == CAP_LIB_GO)
		id = bpf_map_lookup_elem(&go_conns, &ok);
	else
		id = bpf_map_lookup_elem(&ssl_conns, &ok);
	if (!id)
		return;
	info = bpf_map_lookup_elem(&cap_info, id);
	if (info && !info->a.family)
		info->a = sc->a;
}

/* Ties TLS socket (pid, fd) on file to the SSL object of the thread's last
 * libssl call that moved no socket bytes (cap_last_tls), and forgets that
 * call: a stack with memory BIOs writes a call's output right after it.
 * flags as for cap_mark_tls. Whether there was one to tie. A function of
 * its own (noinline): inlined, it took cap_exit_io's frame past what 6.1's
 * verifier allows a call chain (512 bytes). */
static __noinline int cap_tie_last(__u32 fd, __u64 file, __u64 sk, __u32 flags)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid;
	struct cap_tls_call *last = bpf_map_lookup_elem(&cap_last_tls, &tid);

	if (!last)
		return 0;
	cap_mark_tls(pidtid >> 32, fd, file, sk, last, flags);
	bpf_map_delete_elem(&cap_last_tls, &tid);
	return 1;
}

static __always_inline int plain_enter(__u64 fd, __u64 buf, __u32 dir, __u32 msg, __u64 niov)
{
	__u64 pidtid = bpf_get_current_pid_tgid(), sk = 0;
	__u32 tid = (__u32)pidtid, pid = pidtid >> 32;
	struct cap_tls_st *mark;
	struct plain_args a = { .buf = buf, .fd = (__u32)fd, .dir = dir, .msg = msg,
				.niov = niov > 255 ? 255 : (__u8)niov };
	struct cap_fd_key fk = { .pid = pid, .fd = (__u32)fd };
	struct cap_tls_call *in;

	if (fd > 0x7fffffff || !cap_selected(pid))
		return 0;
	a.file = cap_inet_file((__u32)fd, &sk);
	if (!a.file)
		return 0;
	a.sk = sk;
	in = bpf_map_lookup_elem(&cap_in_tls, &tid);
	if (in && (in->library != CAP_LIB_GO || (dir == ACCUM_DIR_WRITE && !msg && cap_tls_rec(buf)))) {
		in->sock = 1;
		cap_mark_tls(pid, (__u32)fd, a.file, sk, in, 0);
		return 0;
	}
	mark = bpf_map_lookup_elem(&cap_tls_fds, &fk);
	if (mark) {
		if (mark->file == a.file) {
			/* TLS: the uprobes see its plaintext; while none does,
			 * its bytes are counted for the unread record. */
			if ((mark->flags & CAP_TLS_PROBED) || !cap_want_tls)
				return 0;
			/* A memory-BIO stack writing what its last call made. */
			if (dir == ACCUM_DIR_WRITE && cap_tie_last((__u32)fd, a.file, sk, 0))
				return 0;
			a.tls = 1;
			bpf_map_update_elem(&plain_inflight, &tid, &a, BPF_ANY);
			return 0;
		}
		cap_tls_gone(&fk, mark); /* the fd was reused */
	}
	if (!cap_want_plain)
		return 0;
	bpf_map_update_elem(&plain_inflight, &tid, &a, BPF_ANY);
	return 0;
}

/* Bytes a msghdr's iovecs did not carry to the channel: counted, and the
 * connection's sequence broken so the reader sees the gap. */
static __always_inline void plain_lose(__u64 id, __u64 n)
{
	struct accum_conn *c = bpf_map_lookup_elem(&accum_conns, &id);

	accum_stat_add(ACCUM_STAT_LOST_BYTES, n);
	if (c)
		__sync_fetch_and_add(&c->next_seq, 1);
}

static __always_inline int plain_exit(long ret)
{
	__u64 pidtid = bpf_get_current_pid_tgid(), id, left, first, flen;
	__u32 tid = (__u32)pidtid, pid = pidtid >> 32;
	struct plain_args *a;
	struct plain_val *v;
	struct cap_tls_st *st;
	struct cap_tls_call *in;
	struct cap_fd_key fk;
	struct user_msghdr mh;
	struct iovec iov;
	__u32 meta;

	a = bpf_map_lookup_elem(&plain_inflight, &tid);
	if (!a)
		return 0;
	if (ret <= 0 || ret > 0x7fffffff)
		goto out;
	fk.pid = pid;
	fk.fd = a->fd;
	if (a->tls) {
		st = bpf_map_lookup_elem(&cap_tls_fds, &fk);
		if (st && st->file == a->file)
			__sync_fetch_and_add(&st->bytes[a->dir & 1], ret);
		goto out;
	}
	first = a->buf;
	flen = ret;
	/* The iovecs in mh (6.1 bounds a call chain's stack at 512 bytes: no
	 * room for two more locals here). */
	mh.msg_iov = 0;
	mh.msg_iovlen = 0;
	if (a->msg == PLAIN_IOV) {
		mh.msg_iov = (struct iovec *)a->buf;
		mh.msg_iovlen = a->niov;
	} else if (a->msg == PLAIN_MSG && bpf_probe_read_user(&mh, sizeof(mh), (void *)a->buf)) {
		mh.msg_iov = 0;
	}
	if (a->msg) {
		if (!mh.msg_iov || !mh.msg_iovlen || bpf_probe_read_user(&iov, sizeof(iov), mh.msg_iov)) {
			first = 0;
		} else {
			first = (__u64)iov.iov_base;
			flen = iov.iov_len < flen ? iov.iov_len : flen;
		}
	}
	v = bpf_map_lookup_elem(&plain_fds, &fk);
	/* The first bytes of a connection the capture did not see begin (or
	 * that is new) on a TLS record, or a hello early in the stream. A Go
	 * Read in a call (cap_in_tls) reads it: probed, but not tied to the
	 * call (its goroutine may have left the thread). */
	if (first) {
		__u32 fl = 0;

		if ((!v || v->file != a->file || v->bytes < CAP_YOUNG) && cap_tls_hello(first, flen))
			fl = CAP_TLS_UNSEEN;
		else if ((!v || v->file != a->file) && cap_tls_rec(first))
			fl = CAP_TLS_UNSEEN | CAP_TLS_MIDSTREAM;
		if (fl) {
			in = bpf_map_lookup_elem(&cap_in_tls, &tid);
			if (in && in->library == CAP_LIB_GO)
				fl = (fl & ~CAP_TLS_UNSEEN) | CAP_TLS_PROBED;
			/* A memory-BIO stack (Node.js) writing the hello its
			 * last libssl call made: read from its start. */
			if (!in && a->dir == ACCUM_DIR_WRITE &&
			    cap_tie_last(a->fd, a->file, a->sk, fl & CAP_TLS_MIDSTREAM ? fl : 0))
				goto out;
			/* A hello in a process whose probes have fired: they are
			 * in place before its first plaintext byte. */
			if (fl == CAP_TLS_UNSEEN && bpf_map_lookup_elem(&cap_tls_procs, &pid))
				fl = 0;
			cap_mark_tls(pid, a->fd, a->file, a->sk, 0, fl);
			goto out;
		}
	}
	v = plain_conn(pid, a->fd, a->file, a->sk);
	if (!v)
		goto out;
	v->bytes += ret;
	id = v->id;
	meta = ACCUM_META(a->dir, cap_proto, 1);
	if (!a->msg) {
		accum_write(id, a->buf, (__u32)ret, ACCUM_PIDTID(pid, tid), meta);
		goto out;
	}
	left = ret;
	if (!mh.msg_iov) {
		accum_stat_add(ACCUM_STAT_FAULTS, 1);
		plain_lose(id, left);
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
		plain_lose(id, left);
out:
	bpf_map_delete_elem(&plain_inflight, &tid);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_write")
int cap_enter_write(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, PLAIN_BUF, 0);
}

SEC("tracepoint/syscalls/sys_enter_sendto")
int cap_enter_sendto(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, PLAIN_BUF, 0);
}

SEC("tracepoint/syscalls/sys_enter_sendmsg")
int cap_enter_sendmsg(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, PLAIN_MSG, 0);
}

SEC("tracepoint/syscalls/sys_enter_read")
int cap_enter_read(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, PLAIN_BUF, 0);
}

SEC("tracepoint/syscalls/sys_enter_recvfrom")
int cap_enter_recvfrom(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, PLAIN_BUF, 0);
}

SEC("tracepoint/syscalls/sys_enter_recvmsg")
int cap_enter_recvmsg(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, PLAIN_MSG, 0);
}

SEC("tracepoint/syscalls/sys_enter_writev")
int cap_enter_writev(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_WRITE, PLAIN_IOV, ctx->args[2]);
}

SEC("tracepoint/syscalls/sys_enter_readv")
int cap_enter_readv(struct trace_event_raw_sys_enter *ctx)
{
	return plain_enter(ctx->args[0], ctx->args[1], ACCUM_DIR_READ, PLAIN_IOV, ctx->args[2]);
}

/* One exit program serves every call: the in-flight entry says which. */
SEC("tracepoint/syscalls/sys_exit_write")
int cap_exit_io(struct trace_event_raw_sys_exit *ctx)
{
	return plain_exit(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_close")
int cap_close(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	struct cap_fd_key k = { .pid = pidtid >> 32, .fd = (__u32)ctx->args[0] };
	struct plain_val *v;
	struct cap_tls_st *st = bpf_map_lookup_elem(&cap_tls_fds, &k);

	if (st)
		cap_tls_gone(&k, st);
	v = bpf_map_lookup_elem(&plain_fds, &k);
	if (!v)
		return 0;
	accum_close(v->id);
	bpf_map_delete_elem(&plain_fds, &k);
	return 0;
}

#endif
