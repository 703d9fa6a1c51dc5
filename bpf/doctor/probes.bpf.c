// SPDX-License-Identifier: GPL-2.0
/*
 * probes.bpf.c - one tiny program per kernel capability Cistern relies on.
 *
 * `cistern doctor` loads each program on its own (with only the maps it
 * uses), attaches or test-runs it, triggers it and reads the `hits` counter
 * slot that the program bumps, so a check reports what the running kernel
 * really does rather than what its config claims, and one program the
 * kernel refuses hides no other result. The programs that test-run are XDP
 * (BPF_PROG_TEST_RUN), as Cistern's own user-invoked programs are; only
 * probe_syscall is a SYSCALL program, for the syscall_prog check.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cistern/taskstack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Slot numbers of the `hits` array; mirrored in doctor/probes.go. */
enum probe_slot {
	SLOT_TRACEPOINT = 0,
	SLOT_RAW_TP,
	SLOT_TP_BTF,
	SLOT_UPROBE,
	SLOT_XDP,
	SLOT_TCX,
	SLOT_SYSCALL,
	SLOT_RINGBUF,
	SLOT_TIMER,
	SLOT_KPROBE,
	SLOT_FENTRY,
	SLOT_LOOP,
	SLOT_XDP_BYTES,
	SLOT_MAX = 16,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
} hits SEC(".maps");

/* Only events of this tgid count, so unrelated processes cannot fake a pass. */
volatile const __u32 target_tgid = 0;

static __always_inline void bump(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&hits, &slot);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int mine(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

SEC("tracepoint/syscalls/sys_enter_getppid")
int probe_tracepoint(void *ctx)
{
	if (mine())
		bump(SLOT_TRACEPOINT);
	return 0;
}

SEC("raw_tp/sys_enter")
int probe_raw_tp(void *ctx)
{
	if (mine())
		bump(SLOT_RAW_TP);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(probe_tp_btf, struct pt_regs *regs, long id)
{
	if (mine())
		bump(SLOT_TP_BTF);
	return 0;
}

SEC("uprobe")
int probe_uprobe(struct pt_regs *ctx)
{
	CISTERN_TASK_STACK(ctx);
	if (mine())
		bump(SLOT_UPROBE);
	return 0;
}

SEC("xdp")
int probe_xdp(struct xdp_md *ctx)
{
	bump(SLOT_XDP);
	return XDP_PASS;
}

SEC("tc")
int probe_tcx(struct __sk_buff *skb)
{
	bump(SLOT_TCX);
	return TCX_NEXT;
}

/* BPF_PROG_TEST_RUN targets. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} ring SEC(".maps");

/* The cookie the ring buffer record carries (set by the doctor). */
volatile const __u64 ring_cookie = 0;

/* Ring buffers: reserve and submit a record that the doctor reads back. */
SEC("xdp")
int probe_ringbuf(struct xdp_md *ctx)
{
	__u64 *rec = bpf_ringbuf_reserve(&ring, sizeof(*rec), 0);

	if (!rec)
		return XDP_ABORTED;
	*rec = ring_cookie;
	bpf_ringbuf_submit(rec, 0);
	bump(SLOT_RINGBUF);
	return XDP_PASS;
}

/* SYSCALL programs (only reported: Cistern runs XDP programs instead). */
SEC("syscall")
int probe_syscall(void *ctx)
{
	bump(SLOT_SYSCALL);
	return 0;
}

/* bpf_loop: ten iterations, each bumping the slot. */
static long loop_step(__u32 i, void *data)
{
	bump(SLOT_LOOP);
	return 0;
}

SEC("xdp")
int probe_loop(struct xdp_md *ctx)
{
	return bpf_loop(10, loop_step, 0, 0) == 10 ? XDP_PASS : XDP_ABORTED;
}

/* bpf_xdp_load_bytes/store_bytes: copy the packet's first 8 bytes to bytes
 * 8-15 and back into the slot. */
SEC("xdp")
int probe_xdp_bytes(struct xdp_md *ctx)
{
	__u64 v = 0;
	__u32 k = SLOT_XDP_BYTES;

	if (bpf_xdp_load_bytes(ctx, 0, &v, sizeof(v)) || bpf_xdp_store_bytes(ctx, 8, &v, sizeof(v)))
		return XDP_ABORTED;
	bpf_map_update_elem(&hits, &k, &v, BPF_ANY);
	return XDP_PASS;
}

/* bpf_timer: arm a timer from a test-run XDP program; its callback bumps a
 * slot. */
struct timer_elem {
	struct bpf_timer t;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct timer_elem);
} timers SEC(".maps");

static int timer_cb(void *map, __u32 *key, struct timer_elem *e)
{
	bump(SLOT_TIMER);
	return 0;
}

SEC("xdp")
int probe_timer(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct timer_elem *e = bpf_map_lookup_elem(&timers, &k);

	if (!e)
		return XDP_ABORTED;
	bpf_timer_init(&e->t, &timers, 1 /* CLOCK_MONOTONIC */);
	bpf_timer_set_callback(&e->t, timer_cb);
	return bpf_timer_start(&e->t, 1000 /* ns */, 0) ? XDP_DROP : XDP_PASS;
}
