// SPDX-License-Identifier: GPL-2.0
/* The tracker alone, for recording a page-access trace (package pagecache,
 * Recorder): the tracepoint programs of track.bpf.h hand every event to
 * user space through a ring buffer, with no policy. The agent does not
 * use it: its policy objects apply the same events in the kernel
 * (apply.bpf.h). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "cistern/pagecache.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} pc_events SEC(".maps");

/* Wake the reader once this much is queued, not at every event: a wakeup
 * per folio preempted the workload for every folio it read (the reader
 * also polls). */
#define PC_WAKE_BYTES (128 * sizeof(struct pc_event))

static __always_inline struct pc_event *pc_event_reserve(__u64 *tag)
{
	return bpf_ringbuf_reserve(&pc_events, sizeof(struct pc_event), 0);
}

static __always_inline void pc_event_commit(struct pc_event *e, __u64 tag)
{
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&pc_events, BPF_RB_AVAIL_DATA) >= PC_WAKE_BYTES ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

#include "track.bpf.h"

char _license[] SEC("license") = "GPL";
