/* SPDX-License-Identifier: GPL-2.0 */
/*
 * select.bpf.h - which processes a capture program looks at.
 *
 * cap_mode (frozen .rodata) picks one of:
 *   CAP_SEL_PIDS    the tgids in cap_pids: the loader puts the target and
 *                   its descendants there, and cap_fork adds every process
 *                   they fork from then on (a PostgreSQL postmaster's
 *                   backends), cap_exit_proc removes a process that exits;
 *   CAP_SEL_CGROUP  tasks in the cgroup-v2 subtree cap_cgid at depth
 *                   cap_cglevel: the ancestor of the current cgroup at that
 *                   depth is the cgroup itself for every task inside it and
 *                   its descendants, and something else for every other task;
 *   CAP_SEL_ALL     every process.
 * The uprobes are attached to every process using the library, so this
 * check, not the uprobe's own pid filter, decides.
 */
#ifndef CISTERN_CAPTURE_SELECT_BPF_H
#define CISTERN_CAPTURE_SELECT_BPF_H

#include <bpf/bpf_core_read.h>

#define CAP_SEL_PIDS 0
#define CAP_SEL_CGROUP 1
#define CAP_SEL_ALL 2

const volatile __u8 cap_mode = CAP_SEL_PIDS;
const volatile __u32 cap_self = 0; /* the agent itself: never captured */
const volatile __u64 cap_cgid = 0;
const volatile __u32 cap_cglevel = 0;

/* tgid -> 1: the processes captured in CAP_SEL_PIDS mode. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} cap_pids SEC(".maps");

/* [0]: forks of captured processes that cap_pids had no room for. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cap_sel_full SEC(".maps");

/* Defined by each program: close and forget every connection of tgid. */
static void cap_proc_gone(__u32 tgid);

static __always_inline int cap_selected(__u32 tgid)
{
	if (tgid == cap_self)
		return 0;
	if (cap_mode == CAP_SEL_ALL)
		return 1;
	if (cap_mode == CAP_SEL_CGROUP)
		return bpf_get_current_ancestor_cgroup_id(cap_cglevel) == cap_cgid;
	return bpf_map_lookup_elem(&cap_pids, &tgid) != 0;
}

/* A new process (not a thread) forked by a captured one is captured too. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(cap_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid, zk = 0;
	__u8 one = 1;
	__u64 *full;

	if (cap_mode != CAP_SEL_PIDS || ptgid == ctgid || !bpf_map_lookup_elem(&cap_pids, &ptgid))
		return 0;
	if (bpf_map_update_elem(&cap_pids, &ctgid, &one, BPF_ANY)) {
		full = bpf_map_lookup_elem(&cap_sel_full, &zk);
		if (full)
			__sync_fetch_and_add(full, 1);
	}
	return 0;
}

/* sched_process_exit passes (task, group_dead) on newer kernels (6.18
 * here) but only (task) on 6.12 and older. Pointers to an undefined (forward)
 * struct match any struct task_struct, so only the parameter count and
 * the bool decide whether this flavor matches the running kernel. */
struct task_struct___cap_fwd;
typedef void (*btf_trace_sched_process_exit___cap_gd)(void *, struct task_struct___cap_fwd *, bool);

/* Whether the thread exiting is the last of its process (group_dead).
 * Where the tracepoint passes it (ctx[1]) it is read from there; before,
 * it is derived from the task: do_exit() decrements signal->live before
 * the tracepoint fires, so live == 0 once every thread of the group has
 * passed that point. (Two threads exiting at once may then both see 0:
 * forgetting a process twice is harmless.) ctx[1] is read only in the
 * branch CO-RE keeps, so the verifier of an older kernel never sees it. */
static __always_inline int cap_group_dead(__u64 *ctx, struct task_struct *p)
{
	if (bpf_core_type_matches(btf_trace_sched_process_exit___cap_gd))
		return (__u8)ctx[1] != 0;
	return BPF_CORE_READ(p, signal, live.counter) == 0;
}

/* A captured process whose last thread exits leaves the set (its tgid may
 * be reused by an unrelated process), and its connections end: a process
 * that exits without close() (a PostgreSQL backend leaves its socket to the
 * kernel) would otherwise keep them open for ever. Runs in the exiting
 * task, so cap_selected's cgroup check applies to it. Not BPF_PROG: that
 * would unpack an argument older kernels do not have. */
SEC("tp_btf/sched_process_exit")
int cap_exit_proc(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	__u32 tgid = p->tgid;

	if (!cap_group_dead(ctx, p) || !cap_selected(tgid))
		return 0;
	if (cap_mode == CAP_SEL_PIDS)
		bpf_map_delete_elem(&cap_pids, &tgid);
	cap_proc_gone(tgid);
	return 0;
}

#endif
