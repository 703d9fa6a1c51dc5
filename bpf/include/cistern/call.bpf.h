/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cistern/call.bpf.h - programs that user space calls like a function, with
 * an argument struct in and out, through BPF_PROG_TEST_RUN, on every kernel
 * Cistern supports (Debian 12's 6.1 up).
 *
 * WHY XDP AND NOT SYSCALL
 *   BPF_PROG_TYPE_SYSCALL (5.14) looks made for this, but on 6.1 the verifier
 *   refuses a SYSCALL program that is not sleepable ("Syscall programs can
 *   only be sleepable"; cilium/ebpf loads SEC("syscall") with
 *   BPF_F_SLEEPABLE), and a sleepable program on 6.1 may use only array,
 *   hash and ring buffer maps and no bpf_spin_lock: no PERCPU_ARRAY, no QUEUE,
 *   no pool object lock (later kernels lift both; 6.12 does). An XDP
 *   program, run with BPF_PROG_TEST_RUN, has neither limit on any kernel: it
 *   may use every map type and bpf_spin_lock, and the kernel hands it a
 *   packet buffer that it copies in from user space and back out after the
 *   run (since 4.12). That buffer carries the argument struct. Nothing is
 *   attached to an interface: the program only runs when user space asks.
 *
 * USE
 *   #include "vmlinux.h"                  (or linux/bpf.h: struct xdp_md, XDP_*)
 *   #include "cistern/call.bpf.h"
 *   CISTERN_CALL(my_op, struct my_args, a)
 *   {
 *           a->ret = do_something(a->id);  // a points to a copy on the stack
 *   }
 *   defines SEC("xdp") int my_op(struct xdp_md *ctx), which checks that the
 *   packet holds at least sizeof(struct my_args) bytes (a direct packet
 *   access bound, which every kernel's verifier understands), copies them to
 *   the stack, runs the body (a void function: return; leaves early), copies
 *   the struct back into the packet and returns XDP_PASS. A packet shorter
 *   than the struct runs nothing and returns XDP_ABORTED. The program takes
 *   no other input: results go in *a or in maps. The body is inlined (no
 *   extra call frame: the verifier allows 8); an empty function that nothing
 *   calls, ____my_op_args(struct my_args *), keeps struct my_args in the
 *   object's BTF, so bpf2go -type my_args generates it for Go.
 *   From Go: kernel.Call(prog, &args) (package kernel, kernel/call.go)
 *   encodes the struct in host byte order, pads it, runs the program and
 *   decodes the packet back into args; XDP_ABORTED comes back as an error.
 *
 * LIMITS
 *   - The packet is at least 14 bytes (ETH_HLEN: the kernel refuses less;
 *     kernel.Call pads) and at most CISTERN_CALL_MAX_ARGS bytes (one page
 *     less XDP's 256-byte headroom and struct skb_shared_info; larger input
 *     would go to fragments the program does not see). Keep argument structs
 *     small: they are copied to the 512-byte stack. Bulk data goes through a
 *     map (a staging ARRAY, a batch map), as bpf/pool and bpf/evict do.
 *   - Only helpers XDP offers: maps, bpf_loop, bpf_for_each_map_elem,
 *     bpf_spin_lock, bpf_timer_*, ring buffers, bpf_ktime_get_*ns,
 *     bpf_probe_read_kernel (base helpers, with CAP_PERFMON). No
 *     bpf_get_current_pid_tgid/comm/task or other task helpers: the caller's
 *     identity, if a body needs it, comes in the argument struct.
 *   - The run cannot sleep, and it keeps its CPU (migration, and depending
 *     on the kernel preemption or bottom halves, are disabled while it
 *     runs): bound the work of one call (bpf_loop over a batch), as
 *     evict_replay does.
 */
#ifndef CISTERN_CALL_BPF_H
#define CISTERN_CALL_BPF_H

#include <bpf/bpf_helpers.h>

/* PAGE_SIZE - XDP_PACKET_HEADROOM - SKB_DATA_ALIGN(sizeof(struct
 * skb_shared_info)) on x86-64 and arm64: the linear data BPF_PROG_TEST_RUN
 * gives an XDP program. kernel.CallMaxArgs says the same in Go. */
#define CISTERN_CALL_MAX_ARGS 3520

/* The argument struct of a call that takes nothing and returns one number
 * (kernel.CallRet in Go). */
struct cistern_call_ret {
	__s64 ret;
};

#define CISTERN_CALL(name, type, a)                                                  \
	static __always_inline void ____##name(type *a);                            \
	/* Never called: puts the argument struct in the object's BTF. */           \
	static __attribute__((used, noinline)) void ____##name##_args(type *a)     \
	{                                                                            \
	}                                                                            \
	SEC("xdp")                                                                   \
	int name(struct xdp_md *ctx)                                                 \
	{                                                                            \
		_Static_assert(sizeof(type) <= CISTERN_CALL_MAX_ARGS,                \
			       #type " is too large for a CISTERN_CALL packet");    \
		type *__pkt = (type *)(long)ctx->data;                              \
		type __args;                                                         \
                                                                                     \
		if ((void *)(__pkt + 1) > (void *)(long)ctx->data_end)               \
			return XDP_ABORTED;                                          \
		__builtin_memcpy(&__args, __pkt, sizeof(__args));                    \
		____##name(&__args);                                                 \
		/* Still in bounds: the body cannot reach ctx, so it calls nothing   \
		 * that moves the packet (bpf_xdp_adjust_*). */                      \
		__builtin_memcpy(__pkt, &__args, sizeof(__args));                    \
		return XDP_PASS;                                                     \
	}                                                                            \
	static __always_inline void ____##name(type *a)

#endif /* CISTERN_CALL_BPF_H */
