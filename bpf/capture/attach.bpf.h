/* SPDX-License-Identifier: GPL-2.0 */
/*
 * attach.bpf.h - the kernel tells the agent, through its control ring
 * (cap_ctl), what it must attach uprobes to, and when a TLS connection
 * went unread (part of capture.bpf.c).
 *
 *   cap_exec      tp_btf/sched_process_exec: a selected process executes a
 *                 file the agent has not looked at yet (cap_seen): the
 *                 agent reads it (a Go binary with crypto/tls?) and
 *                 attaches the Go TLS uprobes;
 *   cap_lib_open  syscalls/sys_enter_openat and sys_exit_openat: a selected
 *                 process opens a file named libssl.so* not looked at yet
 *                 (the loader opens a library before it maps it): the
 *                 agent attaches the libssl uprobes, by the path opened.
 * cap_seen holds the files (device, inode, generation) the agent has dealt
 * with, so each file is announced until it is attached and never after:
 * uprobes follow the file, every later process mapping it is traced from
 * its first instruction.
 *
 * --hold-new (cap_hold): the process that executes or opens such a file is
 * stopped before it returns to user space (bpf_send_signal(SIGSTOP)) and
 * put in cap_held (tgid -> when); the agent continues it (SIGCONT) once the
 * file's uprobes are attached, or after --hold-max, and its watchdog
 * process continues every process left in cap_held if the agent dies.
 *
 * A stop is seen by the parent (waitpid WUNTRACED), and supervisors (su,
 * runuser, sudo) pass it on: they stop themselves, and continue their
 * child once continued. Nobody would continue them: the command finishes
 * and its supervisor sits stopped for ever, and so does whoever waits for
 * it. So a hold remembers the parent (cap_held_parent), cap_self_stop
 * notes a parent that stops itself (cap_sup, parent -> child), and the
 * agent (or watchdog) continues it once the child is no longer held.
 *
 * Unread connections (plain.bpf.h) are announced here too (CAP_EV_UNREAD).
 */
#ifndef CISTERN_CAPTURE_ATTACH_BPF_H
#define CISTERN_CAPTURE_ATTACH_BPF_H

#define CAP_EV_EXEC 1
#define CAP_EV_LIB 2
#define CAP_EV_UNREAD 3

#define CAP_SIGCONT 18
#define CAP_SIGSTOP 19 /* SIGTSTP 20, SIGTTIN 21 */
#define CAP_SIGTTOU 22
#define CAP_PATH_MAX 256

const volatile __u8 cap_hold = 0; /* --hold-new */

struct cap_file {
	__u64 dev; /* the kernel's dev_t (major << 20 | minor) */
	__u64 ino;
	__u32 gen;
	__u32 pad;
};

/* One control-ring event (capture/attach.go reads it). */
struct cap_ev {
	__u8 type;
	__u8 held;   /* the process was stopped (--hold-new) */
	__u16 flags; /* CAP_EV_UNREAD: CAP_TLS_* of the connection */
	__u32 pid;
	__u64 ts;    /* bpf_ktime_get_ns() */
	struct cap_file f;
	__u32 fd;
	__u32 pad;
	__u64 bytes[2]; /* CAP_EV_UNREAD: bytes written, read with no TLS probe in a call */
	struct cap_addr a;
	char comm[16];
	char path[CAP_PATH_MAX]; /* as given to execve or openat */
};

struct cap_ev *cap_ev_unused __attribute__((unused)); /* for bpf2go -type */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} cap_ctl SEC(".maps");

/* [0]: control events the ring had no room for. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_ctl_lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct cap_file);
	__type(value, __u8);
} cap_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} cap_held SEC(".maps");

/* The parent of a process held, by parent tgid: the child's tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} cap_held_parent SEC(".maps");

/* A parent that stopped itself after its child was held (parent -> child):
 * whoever deletes the entry continues the parent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} cap_sup SEC(".maps");

static __always_inline void cap_ctl_count_lost(void)
{
	__u32 zk = 0;
	__u64 *n = bpf_map_lookup_elem(&cap_ctl_lost, &zk);

	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline int cap_file_key(struct file *f, struct cap_file *k)
{
	struct inode *ino = BPF_CORE_READ(f, f_inode);

	if (!ino)
		return 0;
	k->dev = BPF_CORE_READ(ino, i_sb, s_dev);
	k->ino = BPF_CORE_READ(ino, i_ino);
	k->gen = BPF_CORE_READ(ino, i_generation);
	return 1;
}

/* A reserved event for file k of tgid, or NULL (counted). */
static __always_inline struct cap_ev *cap_ev_new(__u8 type, __u32 tgid, struct cap_file *k)
{
	struct cap_ev *ev = bpf_ringbuf_reserve(&cap_ctl, sizeof(*ev), 0);

	if (!ev) {
		cap_ctl_count_lost();
		return 0;
	}
	ev->type = type;
	ev->held = 0;
	ev->flags = 0;
	ev->pid = tgid;
	ev->ts = bpf_ktime_get_ns();
	ev->f = *k;
	ev->fd = 0;
	ev->pad = 0;
	ev->bytes[0] = 0;
	ev->bytes[1] = 0;
	__builtin_memset(&ev->a, 0, sizeof(ev->a));
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	ev->path[0] = 0;
	return ev;
}

/* --hold-new: stop the current process until the agent continues it. The
 * stop is sent before the entry exists: whoever deletes the entry sends
 * the SIGCONT, and a SIGCONT sent before the SIGSTOP would not undo it. */
static __always_inline __u8 cap_hold_current(__u32 tgid, __u64 now)
{
	struct task_struct *t;
	__u32 ppid;

	if (!cap_hold)
		return 0;
	if (bpf_send_signal(CAP_SIGSTOP))
		return 0;
	if (bpf_map_update_elem(&cap_held, &tgid, &now, BPF_ANY)) {
		bpf_send_signal(CAP_SIGCONT); /* flushes the pending stop */
		return 0;
	}
	t = (struct task_struct *)bpf_get_current_task();
	ppid = BPF_CORE_READ(t, real_parent, tgid);
	bpf_map_update_elem(&cap_held_parent, &ppid, &tgid, BPF_ANY);
	return 1;
}

/* A process that stops itself (su, runuser, sudo passing on their child's
 * stop) while a child of its was held: noted in cap_sup for the agent to
 * continue. Attached with --hold-new only. */
SEC("tp_btf/signal_generate")
int BPF_PROG(cap_self_stop, int sig, struct kernel_siginfo *info, struct task_struct *task, int group, int result)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *child;

	if (sig < CAP_SIGSTOP || sig > CAP_SIGTTOU || result != 0 /* delivered */ ||
	    BPF_CORE_READ(task, tgid) != tgid)
		return 0;
	child = bpf_map_lookup_elem(&cap_held_parent, &tgid);
	if (child)
		bpf_map_update_elem(&cap_sup, &tgid, child, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(cap_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct cap_file k = {};
	struct cap_ev *ev;

	if (!cap_selected(tgid) || !cap_file_key(BPF_CORE_READ(bprm, file), &k) ||
	    bpf_map_lookup_elem(&cap_seen, &k))
		return 0;
	ev = cap_ev_new(CAP_EV_EXEC, tgid, &k);
	if (!ev)
		return 0;
	bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), BPF_CORE_READ(bprm, filename));
	ev->held = cap_hold_current(tgid, ev->ts);
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* An openat in flight whose file name starts with libssl.so: the path as
 * the process gave it (the file itself is known at the exit, from the fd). */
struct cap_open {
	char path[2 * CAP_PATH_MAX]; /* CAP_PATH_MAX used; the rest for the masked reads */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct cap_open);
} cap_opens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cap_open);
} cap_open_scratch SEC(".maps");

struct cap_base_scan {
	struct cap_open *o;
	__u32 n;
	__u32 base;
};

static long cap_base_cb(__u64 i, struct cap_base_scan *s)
{
	if (i >= s->n || i >= CAP_PATH_MAX)
		return 1;
	if (s->o->path[i & (CAP_PATH_MAX - 1)] == '/')
		s->base = i + 1;
	return 0;
}

/* Syscall tracepoints, not fentry/security_file_open: fentry needs the
 * ftrace trampolines some kernels are built without (a Firecracker guest
 * refuses it with EPERM). The loader opens a library before it maps it. */
SEC("tracepoint/syscalls/sys_enter_openat")
int cap_lib_open(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid, zk = 0;
	struct cap_base_scan s = {};
	struct cap_open *o;
	const char *b;
	long n;

	if (!cap_selected(pidtid >> 32))
		return 0;
	o = bpf_map_lookup_elem(&cap_open_scratch, &zk);
	if (!o)
		return 0;
	n = bpf_probe_read_user_str(o->path, CAP_PATH_MAX, (const void *)ctx->args[1]);
	if (n < 10)
		return 0;
	s.o = o;
	s.n = n;
	bpf_loop(CAP_PATH_MAX, cap_base_cb, &s, 0);
	b = &o->path[s.base & (CAP_PATH_MAX - 1)];
	if (b[0] != 'l' || b[1] != 'i' || b[2] != 'b' || b[3] != 's' || b[4] != 's' || b[5] != 'l' ||
	    b[6] != '.' || b[7] != 's' || b[8] != 'o')
		return 0;
	bpf_map_update_elem(&cap_opens, &tid, o, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_openat")
int cap_lib_opened(struct trace_event_raw_sys_exit *ctx)
{
	__u64 pidtid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pidtid, tgid = pidtid >> 32;
	struct task_struct *t;
	struct fdtable *fdt;
	struct file **fds, *f = 0;
	struct cap_file k = {};
	struct cap_open *o;
	struct cap_ev *ev;
	long fd = ctx->ret;

	o = bpf_map_lookup_elem(&cap_opens, &tid);
	if (!o)
		return 0;
	if (fd < 0)
		goto out;
	t = (struct task_struct *)bpf_get_current_task();
	fdt = BPF_CORE_READ(t, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		goto out;
	fds = BPF_CORE_READ(fdt, fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		goto out;
	if (!cap_file_key(f, &k) || bpf_map_lookup_elem(&cap_seen, &k))
		goto out;
	ev = cap_ev_new(CAP_EV_LIB, tgid, &k);
	if (!ev)
		goto out;
	__builtin_memcpy(ev->path, o->path, CAP_PATH_MAX);
	ev->path[CAP_PATH_MAX - 1] = 0;
	ev->held = cap_hold_current(tgid, ev->ts);
	bpf_ringbuf_submit(ev, 0);
out:
	bpf_map_delete_elem(&cap_opens, &tid);
	return 0;
}

#endif
