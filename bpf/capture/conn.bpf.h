/* SPDX-License-Identifier: GPL-2.0 */
/*
 * conn.bpf.h - what the three sources of capture.bpf.c (libssl uprobes,
 * Go crypto/tls uprobes, socket-syscall tracepoints) share:
 *
 *   cap_next_id   one counter of connection ids, so ids never collide in
 *                 the channel whatever source made them;
 *   cap_info      conn id -> struct cap_conn_info: comm, transport, TLS
 *                 library and the socket's addresses, read by user space
 *                 once per connection (LRU: user space deletes what it has
 *                 read at the connection's close; the LRU bounds the rest);
 *   cap_in_tls    tid -> the TLS call (SSL_read/write/_ex, SSL_connect,
 *                 SSL_accept, SSL_do_handshake; Go's (*Conn).Read/Write)
 *                 the thread is inside: a socket syscall made from there
 *                 moves that TLS connection's ciphertext, so its fd is
 *                 marked TLS and tied to the TLS connection (addresses);
 *   cap_tls_fds   (tgid, fd) -> struct file * of a socket marked TLS: the
 *                 plaintext tracepoints skip its bytes (the uprobes see
 *                 them decrypted), and so a connection is never captured
 *                 twice;
 *   cap_tls_sock  (tgid, SSL * or Go *tls.Conn) -> its socket's addresses,
 *                 for the TLS connection's info;
 *   cap_last_tls  tid -> the thread's last libssl call that moved no socket
 *                 bytes itself (memory BIOs: Node.js): the socket write the
 *                 thread makes next carries that SSL object's ciphertext.
 *
 * Addresses are read from the socket in the kernel (task->files->fdt->fd
 * [fd]->private_data->sk, CO-RE) at the first bytes of a connection: a
 * short-lived connection or an exited backend is gone before user space
 * could look it up in /proc/net/tcp.
 */
#ifndef CISTERN_CAPTURE_CONN_BPF_H
#define CISTERN_CAPTURE_CONN_BPF_H

#include <bpf/bpf_core_read.h>

#define CAP_AF_INET 2
#define CAP_AF_INET6 10
#define CAP_SOCK_STREAM 1
#define CAP_SOCK_DGRAM 2
#define CAP_S_IFMT 0170000
#define CAP_S_IFSOCK 0140000

/* cap_conn_info.transport and .library (capture/conn.go mirrors them). */
#define CAP_TR_TLS 1
#define CAP_TR_PLAIN 2
#define CAP_LIB_NONE 0
#define CAP_LIB_OPENSSL 1
#define CAP_LIB_GO 2
#define CAP_LIB_OPENSSL_STATIC 3 /* OpenSSL linked into an executable or another object */
#define CAP_LIB_BORINGSSL 4

const volatile __u8 cap_proto = 1;      /* protocol tag of the records */
const volatile __u8 cap_want_tls = 1;   /* send TLS plaintext (--transport) */
const volatile __u8 cap_want_plain = 1; /* send plaintext socket bytes */

struct cap_addr {
	__u16 family; /* 0: unknown yet */
	__u16 lport;  /* host order */
	__u16 rport;
	__u16 pad;
	__u8 laddr[16]; /* IPv4: the first 4 bytes */
	__u8 raddr[16];
};

struct cap_conn_info {
	struct cap_addr a;
	__u32 pid;
	__u8 transport;
	__u8 library;
	__u8 pad[2];
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct cap_conn_info);
} cap_info SEC(".maps");

/* [0]: last connection id handed out. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_next_id SEC(".maps");

struct cap_tls_call {
	__u64 key; /* SSL * or *tls.Conn */
	__u8 library;
	__u8 handshake; /* entered by Go's handshakeContext, not inside a Read or Write */
	__u8 sock;      /* a socket syscall was made inside the call */
	__u8 pad[5];
};

/* LRU: a Go Read that resumes on another thread leaves its first
 * thread's entry behind (harmless: for Go only TLS-record writes count). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct cap_tls_call);
} cap_in_tls SEC(".maps");

/* A stack that does its own socket I/O outside the library (Node.js:
 * SSL_write into a memory BIO, then libuv writes the BIO's bytes) makes no
 * socket syscall inside a libssl call, so cap_in_tls never ties its socket.
 * Node writes a TLS object's output right after the call that made it, on
 * the same thread: the next write of a TLS socket no probe has tied yet is
 * that object's (plain.bpf.h). Reads are not used to tie: a server reads a
 * ClientHello before any call on its SSL object. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct cap_tls_call);
} cap_last_tls SEC(".maps");

/* tgid -> 1: a TLS probe (libssl or Go) has fired in the process, so its
 * uprobes are in place: a hello on a new socket there starts a connection
 * they will read from its first plaintext byte, even when the socket I/O
 * ran on a thread that was not inside the call (a goroutine moved). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} cap_tls_procs SEC(".maps");

struct cap_fd_key {
	__u32 pid;
	__u32 fd;
};

/* cap_tls_st.flags: how the socket's TLS stream was seen. */
#define CAP_TLS_PROBED 1    /* a TLS probe was in a call on it: its plaintext is read */
#define CAP_TLS_UNSEEN 2    /* its first TLS bytes passed with no TLS probe in a call */
#define CAP_TLS_MIDSTREAM 4 /* and they were no hello: its handshake came before */

/* A socket marked TLS. One that no probe read from its first TLS byte is
 * announced as unread at its end (plain.bpf.h, attach.bpf.h): addresses
 * and comm from when it was marked, bytes moved while no probe read it. */
struct cap_tls_st {
	__u64 file;
	__u64 bytes[2]; /* by ACCUM_DIR_*, while not CAP_TLS_PROBED */
	__u32 flags;
	__u32 pad;
	struct cap_addr a;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct cap_fd_key);
	__type(value, struct cap_tls_st);
} cap_tls_fds SEC(".maps");

/* Per-CPU scratch for a new cap_tls_st and a fresh address: 6.1's verifier
 * bounds the stack of a whole call chain (cap_sys_exit -> accum_write ...)
 * at 512 bytes, and these would not fit beside the others. One slot per
 * program (CAP_SLOT_*): on 7.2 these programs run preemptible, and only
 * runs of one program never interleave on a CPU (plain.bpf.h, SKIPPED
 * RUNS). */
#define CAP_SLOT_ENTER 0
#define CAP_SLOT_EXIT 1
#define CAP_SLOT_EXIT_LAST 2

struct cap_scratch {
	struct cap_tls_st st;
	struct cap_addr a;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct cap_scratch);
} cap_scratch SEC(".maps");

struct cap_obj_key {
	__u32 pid;
	__u32 pad;
	__u64 obj;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct cap_obj_key);
	__type(value, struct cap_addr);
} cap_tls_sock SEC(".maps");

static __always_inline __u64 cap_new_id(void)
{
	__u32 zk = 0;
	__u64 *next = bpf_map_lookup_elem(&cap_next_id, &zk);

	return next ? __sync_fetch_and_add(next, 1) + 1 : 0;
}

/* The struct file of fd if it is an internet TCP/UDP socket (and its sock
 * in *skp), else 0. */
static __always_inline __u64 cap_inet_file(__u32 fd, __u64 *skp)
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
	*skp = (__u64)sk;
	return (__u64)f;
}

/* The local and remote address of sk (as connected or accepted now). */
static __always_inline void cap_sock_addr(__u64 skp, struct cap_addr *a)
{
	struct sock *sk = (struct sock *)skp;

	a->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	a->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	a->rport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	/* BPF_CORE_READ_INTO sizes the copy by its destination's type. */
	if (a->family == CAP_AF_INET) {
		BPF_CORE_READ_INTO((__u32 *)a->laddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)a->raddr, sk, __sk_common.skc_daddr);
	} else {
		BPF_CORE_READ_INTO((struct in6_addr *)a->laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO((struct in6_addr *)a->raddr, sk, __sk_common.skc_v6_daddr);
	}
}

/* Records what user space shows of connection id (addresses if a). */
static __always_inline void cap_set_info(__u64 id, __u8 transport, __u8 library, struct cap_addr *a)
{
	struct cap_conn_info in = { .pid = bpf_get_current_pid_tgid() >> 32,
				    .transport = transport, .library = library };

	if (a)
		in.a = *a;
	bpf_get_current_comm(in.comm, sizeof(in.comm));
	bpf_map_update_elem(&cap_info, &id, &in, BPF_ANY);
}

/* Whether buf starts a TLS handshake: a handshake record (type 22, version
 * 3.x) holding a ClientHello or ServerHello. Looked for only in a stream's
 * first bytes, where it means STARTTLS (after a PostgreSQL SSLRequest or a
 * MySQL SSL request) or a TLS library we have no uprobes on: from there on
 * the stream is ciphertext. A PostgreSQL message never starts with byte 22;
 * a MySQL packet would have to be 790 + 65536k bytes long and start a
 * young stream. */
static __always_inline int cap_tls_hello(__u64 buf, __u64 len)
{
	__u8 h[6];

	if (len < sizeof(h) || bpf_probe_read_user(h, sizeof(h), (void *)buf))
		return 0;
	return h[0] == 22 && h[1] == 3 && h[2] <= 4 && (h[5] == 1 || h[5] == 2);
}

/* Whether buf starts with a TLS record header (type 20..23, version 3.x). */
static __always_inline int cap_tls_rec(__u64 buf)
{
	__u8 h[3];

	if (bpf_probe_read_user(h, sizeof(h), (void *)buf))
		return 0;
	return h[0] >= 20 && h[0] <= 23 && h[1] == 3 && h[2] <= 4;
}

#endif
