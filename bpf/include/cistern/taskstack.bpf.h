/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/taskstack.bpf.h - keeps a uprobe program's frames on its task's
 * own kernel stack.
 *
 * WHY
 *   From 6.13 the verifier runs every function of a kprobe-type program
 *   (uprobes are kprobe-type) whose frame is >= 64 bytes on a per-CPU
 *   "private stack" (PRIV_STACK_ADAPTIVE), on the assumption that two runs
 *   of one program never interleave on a CPU. A uprobe program runs with
 *   migration disabled but preemption enabled: on a kernel built with full
 *   or lazy preemption (Debian sid's 7.x: PREEMPT_LAZY) a task preempted
 *   inside it resumes with the locals and spilled registers of the next
 *   task that ran the same program on that CPU. The capture's accumulating
 *   writer then wrote a segment header into another connection's batch,
 *   lost bytes without counting them and sent sequence numbers out of
 *   order (docs/development.md, issue #38). Kprobe and tracepoint programs
 *   run with preemption disabled and are not affected.
 *
 * HOW
 *   The verifier gives no private stack to a program that contains a tail
 *   call (it cannot unwind a caller's private frame), so CISTERN_TASK_STACK
 *   puts one in each program, behind a frozen .rodata word that is always
 *   0: the verifier knows the branch is dead and never walks it, clang
 *   cannot drop it. Nothing runs; the tail-call counter the JIT then keeps
 *   costs a few instructions. bpf_preempt_disable() would be the direct
 *   cure, but the 6.10 and 6.12 verifiers refuse global function calls
 *   under it (accum_write is one), and kernels before 6.10 lack it.
 *
 * USE
 *   #include "cistern/taskstack.bpf.h"
 *   CISTERN_TASK_STACK(ctx); at the top of every uprobe/uretprobe program
 *   (an __always_inline helper it calls first will do). All programs of an
 *   object that use it must be of one type and attach type (the tail-call
 *   map's owner).
 */
#ifndef CISTERN_TASKSTACK_BPF_H
#define CISTERN_TASKSTACK_BPF_H

#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cistern_task_stack SEC(".maps");

/* Always 0 (never set by a loader): the tail call below never runs. */
const volatile __u32 cistern_task_stack_never = 0;

#define CISTERN_TASK_STACK(ctx)                                                \
	do {                                                                   \
		if (cistern_task_stack_never)                                  \
			bpf_tail_call((ctx), &cistern_task_stack, 0);          \
	} while (0)

#endif /* CISTERN_TASKSTACK_BPF_H */
