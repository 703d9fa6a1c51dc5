// SPDX-License-Identifier: GPL-2.0
// Hand-written reference for `cistern bench query`: syscall latency from
// raw_syscalls sys_enter/sys_exit, joined per thread.
//   Q1: max latency per (pid, syscall), per-CPU hashes, two of them so user
//       space reads (and clears) the closed window while the open one fills.
//   Q2: one 24-byte record per syscall through a ring buffer, woken only
//       when a batch is waiting, losses counted.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

// Only this cgroup v2 id is traced (0: every task).
const volatile __u64 target_cgroup = 0;
// Ring bytes waiting before a Q2 submit wakes the reader.
const volatile __u64 wake_bytes = 256 << 10;

// Which Q1 map is open; user space flips it at each window end.
__u32 window = 0;

struct start {
	__u64 ts;
	__u64 nr; // ~0: no syscall in flight
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); // tid
	__type(value, struct start);
} starts SEC(".maps");

struct qkey {
	__u32 pid;
	__u32 nr;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct qkey);
	__type(value, __u64);
} max0 SEC(".maps"), max1 SEC(".maps");

struct rec {
	__u32 pid;
	__u32 tid;
	__u32 nr;
	__u32 _pad;
	__u64 latency_ns;
};

// Keeps struct rec in BTF for bpf2go.
const struct rec *unused_rec __attribute__((unused));

// A record's footprint in the ring: 8-byte header plus struct rec.
#define RECORD_RING_BYTES (8 + sizeof(struct rec))

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} records SEC(".maps");

enum { C_EVENTS, C_LOST, C_NOSTART, C_FULL, C_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);
	if (c)
		(*c)++;
}

static __always_inline bool traced(void)
{
	return !target_cgroup || bpf_get_current_cgroup_id() == target_cgroup;
}

SEC("raw_tp/sys_enter")
int BPF_PROG(qb_enter, struct pt_regs *regs, long id)
{
	if (!traced())
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	// Only this thread writes its entry: after its first syscall, update it
	// in place (a map update would swap in a fresh element every time).
	struct start *p = bpf_map_lookup_elem(&starts, &tid);
	if (p) {
		p->ts = bpf_ktime_get_ns();
		p->nr = id;
		return 0;
	}
	struct start s = { .ts = bpf_ktime_get_ns(), .nr = id };
	if (bpf_map_update_elem(&starts, &tid, &s, BPF_NOEXIST))
		count(C_NOSTART); // table full or bucket busy: this syscall cannot be timed
	return 0;
}

// finish returns the latency of the current thread's syscall and marks it
// done (cheaper than a delete), or -1 when its entry was not seen.
static __always_inline __s64 finish(__u64 id, __u32 *nr)
{
	__u32 tid = (__u32)id;
	struct start *s = bpf_map_lookup_elem(&starts, &tid);
	if (!s || s->nr == ~0ULL)
		return -1;
	__u64 now = bpf_ktime_get_ns();
	*nr = s->nr;
	s->nr = ~0ULL;
	return now - s->ts;
}

static __always_inline void max_into(void *m, struct qkey *k, __u64 lat)
{
	__u64 *v = bpf_map_lookup_elem(m, k);
	if (v) {
		if (lat > *v)
			*v = lat;
	} else if (bpf_map_update_elem(m, k, &lat, BPF_NOEXIST)) {
		// Another CPU cannot race us on a per-CPU map; full is the only failure.
		count(C_FULL);
	}
}

SEC("raw_tp/sys_exit")
int BPF_PROG(qb_exit_max, struct pt_regs *regs, long ret)
{
	if (!traced())
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 nr;
	__s64 lat = finish(id, &nr);
	if (lat < 0)
		return 0;
	struct qkey k = { .pid = id >> 32, .nr = nr };
	if (window & 1)
		max_into(&max1, &k, lat);
	else
		max_into(&max0, &k, lat);
	count(C_EVENTS);
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(qb_exit_rec, struct pt_regs *regs, long ret)
{
	if (!traced())
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 nr;
	__s64 lat = finish(id, &nr);
	if (lat < 0)
		return 0;
	struct rec *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		count(C_LOST);
		return 0;
	}
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->nr = nr;
	r->_pad = 0;
	r->latency_ns = lat;
	// Wake the reader once, when the waiting bytes cross wake_bytes; it
	// also polls on a short deadline, so a crossing missed under
	// concurrency only delays it.
	__u64 avail = bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA);
	__u64 flags = avail >= wake_bytes && avail < wake_bytes + RECORD_RING_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(r, flags);
	count(C_EVENTS);
	return 0;
}
