/* SPDX-License-Identifier: GPL-2.0 */
/*
 * plain.bpf.h - plaintext socket capture (part of capture.bpf.c).
 *
 * The syscall tracepoints of write, read, sendto, recvfrom, sendmsg,
 * recvmsg, writev, readv and close (libuv, so Node.js, writes a corked
 * stream's buffers with writev): syscalls/sys_{enter,exit}_<call> before
 * 7.0, the raw sys_enter and sys_exit from 7.0 (PER-CALL PATH and SKIPPED
 * RUNS below; capture/syscalls.go chooses). At entry, a call of a captured process
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
	__u8 done; /* the first exit program dealt with it (the second deletes it) */
	__u8 pad[7];
};

/* (tgid, fd) -> connection id and the file it belongs to. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct cap_fd_key);
	__type(value, struct plain_val);
} plain_fds SEC(".maps");

/* tid -> the socket call in flight. LRU: an entry whose exits were both
 * skipped, in a thread that ends, is never deleted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct plain_args);
} plain_inflight SEC(".maps");

/* [0]: socket calls whose end no exit program saw (both skipped: see
 * cap_sys_enter); bytes they moved are missing from their stream. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_unseen SEC(".maps");

/* Per thread: the first exit program ran for its current call (set by
 * cap_sys_exit, cleared by cap_sys_exit_last). */
struct cap_exit_mark {
	__u32 first_ran;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cap_exit_mark);
} cap_exit_marks SEC(".maps");

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
					 struct cap_tls_call *in, __u32 flags, __u32 slot)
{
	struct cap_fd_key fk = { .pid = pid, .fd = fd };
	struct cap_obj_key ok = { .pid = pid };
	struct plain_val *v;
	struct cap_tls_st *st = bpf_map_lookup_elem(&cap_tls_fds, &fk);
	struct cap_scratch *sc;
	struct cap_conn_info *info;
	__u64 *id;

	if (in) {
		ok.obj = in->key;
		flags |= CAP_TLS_PROBED;
	}
	if (st && st->file == file) {
		st->flags |= flags & CAP_TLS_PROBED;
		if (!in || bpf_map_lookup_elem(&cap_tls_sock, &ok))
			return; /* known */
	}
	sc = bpf_map_lookup_elem(&cap_scratch, &slot);
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
static __noinline int cap_tie_last(__u32 fd, __u64 file, __u64 sk, __u32 flags, __u32 slot)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid;
	struct cap_tls_call *last = bpf_map_lookup_elem(&cap_last_tls, &tid);

	if (!last)
		return 0;
	cap_mark_tls(pidtid >> 32, fd, file, sk, last, flags, slot);
	bpf_map_delete_elem(&cap_last_tls, &tid);
	return 1;
}

static __always_inline int plain_enter(__u64 fd, __u64 buf, __u32 dir, __u32 msg, __u64 niov,
				       __u32 slot, int tie)
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
		cap_mark_tls(pid, (__u32)fd, a.file, sk, in, 0, slot);
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
			if (tie && dir == ACCUM_DIR_WRITE && cap_tie_last((__u32)fd, a.file, sk, 0, slot))
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

/* The call in flight ended with ret. last: the second exit program, which
 * deletes the entry; the first marks it done. */
static __always_inline int plain_exit(long ret, int last)
{
	__u64 pidtid = bpf_get_current_pid_tgid(), id, left, first, flen;
	__u32 tid = (__u32)pidtid, pid = pidtid >> 32, slot = last ? CAP_SLOT_EXIT_LAST : CAP_SLOT_EXIT;
	struct plain_args *a;
	struct plain_val *v;
	struct cap_tls_st *st;
	struct cap_tls_call *in;
	struct cap_fd_key fk;
	struct iovec *msg_iov;
	__u64 msg_iovlen;
	struct iovec iov;
	__u32 meta;

	a = bpf_map_lookup_elem(&plain_inflight, &tid);
	if (!a)
		return 0;
	if (a->done || ret <= 0 || ret > 0x7fffffff)
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
	/* The iovecs: a msghdr's two fields, not the whole struct on the
	 * stack (6.1 bounds a call chain's stack at 512 bytes, and this
	 * frame is at the head of the longest: cap_sys_exit -> accum_write
	 * -> accum_step_cb -> accum_step -> accum_emit_conn). */
	msg_iov = 0;
	msg_iovlen = 0;
	if (a->msg == PLAIN_IOV) {
		msg_iov = (struct iovec *)a->buf;
		msg_iovlen = a->niov;
	} else if (a->msg == PLAIN_MSG &&
		   (bpf_probe_read_user(&msg_iov, sizeof(msg_iov),
					(void *)(a->buf + __builtin_offsetof(struct user_msghdr, msg_iov))) ||
		    bpf_probe_read_user(&msg_iovlen, sizeof(msg_iovlen),
					(void *)(a->buf + __builtin_offsetof(struct user_msghdr, msg_iovlen))))) {
		msg_iov = 0;
	}
	if (a->msg) {
		if (!msg_iov || !msg_iovlen || bpf_probe_read_user(&iov, sizeof(iov), msg_iov)) {
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
			    cap_tie_last(a->fd, a->file, a->sk, fl & CAP_TLS_MIDSTREAM ? fl : 0, slot))
				goto out;
			/* A hello in a process whose probes have fired: they are
			 * in place before its first plaintext byte. */
			if (fl == CAP_TLS_UNSEEN && bpf_map_lookup_elem(&cap_tls_procs, &pid))
				fl = 0;
			cap_mark_tls(pid, a->fd, a->file, a->sk, 0, fl, slot);
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
	if (!msg_iov) {
		accum_stat_add(ACCUM_STAT_FAULTS, 1);
		plain_lose(id, left);
		goto out;
	}
	for (int i = 0; i < CAP_MAX_IOV && left; i++) {
		__u64 n;

		if (i >= msg_iovlen)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), &msg_iov[i])) {
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
	if (last)
		bpf_map_delete_elem(&plain_inflight, &tid);
	else
		a->done = 1;
	return 0;
}

/* The socket calls' numbers: the raw syscall tracepoints see every call. */
#if defined(__TARGET_ARCH_arm64)
#define CAP_NR_READ 63
#define CAP_NR_WRITE 64
#define CAP_NR_CLOSE 57
#define CAP_NR_READV 65
#define CAP_NR_WRITEV 66
#define CAP_NR_SENDTO 206
#define CAP_NR_RECVFROM 207
#define CAP_NR_SENDMSG 211
#define CAP_NR_RECVMSG 212
#define CAP_SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
#define CAP_ARG1(regs) PT_REGS_PARM1_CORE_SYSCALL(regs)
#define CAP_ARG2(regs) PT_REGS_PARM2_CORE_SYSCALL(regs)
#define CAP_ARG3(regs) CAP_ARG3(regs)
#else
#define CAP_NR_READ 0
#define CAP_NR_WRITE 1
#define CAP_NR_CLOSE 3
#define CAP_NR_READV 19
#define CAP_NR_WRITEV 20
#define CAP_NR_SENDTO 44
#define CAP_NR_RECVFROM 45
#define CAP_NR_SENDMSG 46
#define CAP_NR_RECVMSG 47
/* regs is a tp_btf argument: read in place, no copies on the stack. */
#define CAP_SYSCALL_NR(regs) ((long)(regs)->orig_ax)
#define CAP_ARG1(regs) ((regs)->di)
#define CAP_ARG2(regs) ((regs)->si)
#define CAP_ARG3(regs) ((regs)->dx)
#endif

static __always_inline int cap_socket_nr(long nr)
{
	switch (nr) {
	case CAP_NR_READ:
	case CAP_NR_WRITE:
	case CAP_NR_CLOSE:
	case CAP_NR_READV:
	case CAP_NR_WRITEV:
	case CAP_NR_SENDTO:
	case CAP_NR_RECVFROM:
	case CAP_NR_SENDMSG:
	case CAP_NR_RECVMSG:
		return 1;
	}
	return 0;
}

/* A 32-bit task's call: its numbers are another table's (the syscalls/
 * tracepoints ignore such calls too). */
static __always_inline int cap_compat_call(void)
{
#if defined(__TARGET_ARCH_x86)
	return (bpf_get_current_task_btf()->thread_info.status & 0x0002 /* TS_COMPAT */) != 0;
#else
	return 0;
#endif
}

/* The end of fd: its plaintext stream closes, a TLS one is announced. */
static __always_inline int cap_close_fd(__u32 fd)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	struct cap_fd_key k = { .pid = pidtid >> 32, .fd = fd };
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

/* The entry of socket call nr (arguments in regs). tie: whether a write of
 * a memory-BIO stack may be tied to its last libssl call (cap_tie_last). */
static __always_inline int cap_enter_args(long nr, __u64 fd, __u64 buf, __u64 arg3, __u32 slot, int tie)
{
	if (nr == CAP_NR_CLOSE)
		return cap_close_fd((__u32)fd);
	switch (nr) {
	case CAP_NR_WRITE:
	case CAP_NR_SENDTO:
		return plain_enter(fd, buf, ACCUM_DIR_WRITE, PLAIN_BUF, 0, slot, tie);
	case CAP_NR_READ:
	case CAP_NR_RECVFROM:
		return plain_enter(fd, buf, ACCUM_DIR_READ, PLAIN_BUF, 0, slot, tie);
	case CAP_NR_SENDMSG:
		return plain_enter(fd, buf, ACCUM_DIR_WRITE, PLAIN_MSG, 0, slot, tie);
	case CAP_NR_RECVMSG:
		return plain_enter(fd, buf, ACCUM_DIR_READ, PLAIN_MSG, 0, slot, tie);
	case CAP_NR_WRITEV:
		return plain_enter(fd, buf, ACCUM_DIR_WRITE, PLAIN_IOV, arg3, slot, tie);
	case CAP_NR_READV:
		return plain_enter(fd, buf, ACCUM_DIR_READ, PLAIN_IOV, arg3, slot, tie);
	}
	return 0;
}

static __always_inline int cap_enter_call(struct pt_regs *regs, long nr, __u32 slot, int tie)
{
	return cap_enter_args(nr, CAP_ARG1(regs), CAP_ARG2(regs), CAP_ARG3(regs), slot, tie);
}

/* An entry the thread's last call left: both its exits were skipped, so
 * the bytes it moved are missing (counted), and it is not this call's. */
static __always_inline void cap_stale_entry(__u32 tid)
{
	struct plain_args *a = bpf_map_lookup_elem(&plain_inflight, &tid);
	__u32 zk = 0;
	__u64 *n;

	if (!a)
		return;
	if (!a->done && !a->tls) {
		n = bpf_map_lookup_elem(&cap_unseen, &zk);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	bpf_map_delete_elem(&plain_inflight, &tid);
}

/* cap_enter_call from an exit program, whose entry program was skipped: a
 * function of its own (noinline), without the tie, so that no call chain
 * passes 6.1's 512 bytes (the exit's frame, this one, cap_tie_last and
 * accum_close would). A skipped entry of a memory-BIO stack's write is
 * then counted as unread bytes, not tied. */
static __noinline int cap_enter_again(struct pt_regs *regs, long nr, __u32 slot)
{
	return cap_enter_call(regs, nr, slot, 0);
}

/*
 * SKIPPED RUNS. The kernel runs a program at a tracepoint only if no run of
 * it is already under way on the CPU (a per-CPU recursion guard: the
 * program's own for raw tracepoints, the global bpf_prog_active for the
 * syscalls/ tracepoints, kprobes and bpf() map calls) and counts a skipped
 * run in the program's recursion misses. 7.2 runs the syscall tracepoints'
 * programs with preemption on (faultable syscall tracepoints): on its
 * preemptible kernel (PREEMPT_LAZY) a task preempted inside one holds the
 * guard until it runs again, and every other task's call on that CPU
 * meanwhile is skipped. So each call has more than one chance:
 *   - the exit has two programs, each with a guard of its own: the first
 *     (cap_sys_exit) reads the bytes and marks the entry done, the second
 *     (cap_sys_exit_last, attached after it) reads them only if the first
 *     was skipped, and deletes the entry;
 *   - a call without an entry (not one of ours, or its entry program was
 *     skipped) is looked at again at the exit from the registers, which
 *     still hold the arguments: by the first exit program, or by the
 *     second if the first did not run (cap_exit_marks);
 *   - an entry still not done at the thread's next call had both exits
 *     skipped: counted (cap_unseen). A call whose three programs were all
 *     skipped is lost without a count (the programs' recursion misses
 *     count every skipped run, for any call of any process).
 * Uprobes have no such guard, and 6.18 and older run these programs with
 * preemption off.
 *
 * PREEMPTION OFF. Where the verifier allows global functions (accum_write)
 * under bpf_preempt_disable (7.x; 6.10-6.12 refuse them, older kernels lack
 * the kfunc), the loader sets cap_preempt_off and each of the three
 * programs holds preemption off for its whole body: a task is then
 * preempted inside one only in the few instructions around it, and skipped
 * runs become rare instead of one in a few hundred calls (a 7.2 guest: 1-2
 * of 96 statements lost when all three programs of a call were skipped).
 * With cap_preempt_off 0 (frozen .rodata) the kfunc calls are dead code the
 * verifier never walks, so a kernel without them loads the object too.
 */
extern void bpf_preempt_disable(void) __weak __ksym;
extern void bpf_preempt_enable(void) __weak __ksym;
const volatile __u8 cap_preempt_off = 0;

static __always_inline void cap_preempt_hold(void)
{
	if (cap_preempt_off)
		bpf_preempt_disable();
}

static __always_inline int cap_preempt_release(int ret)
{
	if (cap_preempt_off)
		bpf_preempt_enable();
	return ret;
}
static __always_inline int cap_sys_enter_body(struct pt_regs *regs, long nr)
{
	struct cap_exit_mark *m;

	if (!cap_socket_nr(nr) || cap_compat_call())
		return 0;
	/* A mark the last call's second exit did not clear is stale. */
	m = bpf_task_storage_get(&cap_exit_marks, bpf_get_current_task_btf(), 0, 0);
	if (m)
		m->first_ran = 0;
	cap_stale_entry((__u32)bpf_get_current_pid_tgid());
	return cap_enter_call(regs, nr, CAP_SLOT_ENTER, 1);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(cap_sys_enter, struct pt_regs *regs, long nr)
{
	if (!cap_socket_nr(nr))
		return 0;
	cap_preempt_hold();
	return cap_preempt_release(cap_sys_enter_body(regs, nr));
}

/* An exit: the entry's bytes, or the call looked at again if it has none
 * (and moved bytes). A skipped close is not redone: the fd may name
 * another file by now; its stream ends when the fd turns up on another
 * file or the process exits. */
static __always_inline int cap_exit_call(struct pt_regs *regs, long nr, long ret, int last)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!bpf_map_lookup_elem(&plain_inflight, &tid)) {
		if (ret <= 0)
			return 0;
		cap_enter_again(regs, nr, last ? CAP_SLOT_EXIT_LAST : CAP_SLOT_EXIT);
	}
	return plain_exit(ret, last);
}

static __always_inline int cap_sys_exit_body(struct pt_regs *regs, long ret)
{
	long nr = CAP_SYSCALL_NR(regs);
	struct cap_exit_mark *m;

	if (nr == CAP_NR_CLOSE || !cap_socket_nr(nr) || cap_compat_call())
		return 0;
	m = bpf_task_storage_get(&cap_exit_marks, bpf_get_current_task_btf(), 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (m)
		m->first_ran = 1;
	return cap_exit_call(regs, nr, ret, 0);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(cap_sys_exit, struct pt_regs *regs, long ret)
{
	if (!cap_socket_nr(CAP_SYSCALL_NR(regs)))
		return 0;
	cap_preempt_hold();
	return cap_preempt_release(cap_sys_exit_body(regs, ret));
}

static __always_inline int cap_sys_exit_last_body(struct pt_regs *regs, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	long nr = CAP_SYSCALL_NR(regs);
	struct cap_exit_mark *m;

	if (nr == CAP_NR_CLOSE || !cap_socket_nr(nr) || cap_compat_call())
		return 0;
	m = bpf_task_storage_get(&cap_exit_marks, bpf_get_current_task_btf(), 0, 0);
	if (m && m->first_ran) {
		/* Whatever the first did is done: only the entry to delete
		 * (plain_exit skips a done one). */
		m->first_ran = 0;
		if (!bpf_map_lookup_elem(&plain_inflight, &tid))
			return 0;
		return plain_exit(ret, 1);
	}
	return cap_exit_call(regs, nr, ret, 1);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(cap_sys_exit_last, struct pt_regs *regs, long ret)
{
	if (!cap_socket_nr(CAP_SYSCALL_NR(regs)))
		return 0;
	cap_preempt_hold();
	return cap_preempt_release(cap_sys_exit_last_body(regs, ret));
}

/*
 * PER-CALL PATH. Where the kernel runs the syscall tracepoints' programs
 * with preemption off (before 7.0: capture/syscalls.go), a run is skipped
 * only when it would nest in another BPF program on its CPU, which a
 * task's system call cannot: one program at the entry of the socket calls
 * (syscalls/sys_enter_<call>) and one at their exit suffice, and every
 * other system call runs no program at all. The raw sys_enter/sys_exit
 * programs above run at every system call of every process (about 120 ns
 * each for the three), so they are attached only where runs can be
 * preempted and skipped (7.x). Both paths share the entry and exit code.
 */
SEC("tracepoint/syscalls/sys_enter_write")
int cap_tp_enter(struct trace_event_raw_sys_enter *ctx)
{
	long nr = (int)ctx->id; /* the record's int __syscall_nr; its padding is not zeroed */

	if (!cap_socket_nr(nr))
		return 0;
	cap_stale_entry((__u32)bpf_get_current_pid_tgid());
	return cap_enter_args(nr, ctx->args[0], ctx->args[1], ctx->args[2], CAP_SLOT_ENTER, 1);
}

/* close's record has one argument: a program that reads more is refused
 * there (the record is shorter than the program's reads). */
SEC("tracepoint/syscalls/sys_enter_close")
int cap_tp_close(struct trace_event_raw_sys_enter *ctx)
{
	cap_stale_entry((__u32)bpf_get_current_pid_tgid());
	return cap_close_fd((__u32)ctx->args[0]);
}

SEC("tracepoint/syscalls/sys_exit_write")
int cap_tp_exit(struct trace_event_raw_sys_exit *ctx)
{
	return plain_exit(ctx->ret, 1);
}

#endif
