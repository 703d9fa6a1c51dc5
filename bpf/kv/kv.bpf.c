// SPDX-License-Identifier: GPL-2.0
/*
 * kv.bpf.c - Kerby-KV: memcached GETs answered at XDP from values kept in a
 * Kerby pool (cistern/pool.bpf.h). memcached stays the source of truth.
 *
 *   kv_xdp     (XDP, server ingress)  UDP get hit: reply built in the packet,
 *              XDP_TX. Miss: ticket, pass. UDP set: new version written
 *              through, pass. UDP delete and other writes, TCP writes:
 *              invalidate before memcached sees them, pass.
 *   kv_egress  (TCX egress)           memcached's single-datagram GET replies
 *              fill the pool, unless a write to that key raced with them.
 *   kv_sockops, kv_tcp_verdict, kv_tcp_msg (tcp*.bpf.h)  GETs on memcached's
 *              TCP connections answered in the kernel, in request order.
 *
 * Consistency (once memcached acknowledged a write, no GET answered here
 * returns an older value): the kernel copy is updated or invalidated before
 * memcached receives the write. A fill from a GET reply is accepted only if
 * no write to the key (or flush) happened after the GET missed, and none
 * within kv_fill_quarantine_ns — that covers memcached reordering a GET
 * before a write it received earlier. Two writes to one key closer than
 * kv_write_window_ns may reach memcached in either order, so the key is
 * invalidated instead of updated. The checks run under the entry's lock, so
 * a fill and a write cannot interleave. docs/kerby-kv.md has the argument.
 *
 * Every bound below is a mask or a size the verifier can see: packet bytes are
 * parsed from a 512-byte per-CPU copy indexed with & 511, keys live in
 * 256-byte buffers, copies are bounded by pool_block_size, and every helper
 * length is proved >= 1 (LEN1, LEN_IN) in a form the 6.1 verifier follows.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "cistern/pool.bpf.h"
#include "cistern/kv.h"
#include "cistern/evict.h"
#include "cistern/call.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#include "maps.bpf.h"
#include "parse.bpf.h"
#include "entries.bpf.h"
#include "set.bpf.h"
#include "xdp.bpf.h"
#include "egress.bpf.h"
#include "ingress.bpf.h"
#include "tcp.bpf.h"
#include "tcp_stage.bpf.h"
#include "tcp_verdict.bpf.h"
#include "tcp_msg.bpf.h"

struct kv_reap_loop {
	struct kv_scratch *s;
	__u32 n;
};

static long kv_reap_step(__u64 i, void *arg)
{
	struct kv_reap_loop *lp = arg;
	struct evict_event ev;

	if (bpf_map_pop_elem(&kv_victims, &ev))
		return 1;
	if (kv_invalidate(lp->s, ev.key)) {
		stat(KV_EVICTIONS);
		lp->n++;
	}
	return 0;
}

/* --policy: deletes the victims the policy pushed onto kv_victims (called
 * by the drainer after evict_drain, see cistern/call.bpf.h). a->ret: how
 * many entries went. */
CISTERN_CALL(kv_reap, struct cistern_call_ret, a)
{
	struct kv_reap_loop lp = { .s = scratch() };

	a->ret = 0;
	if (!lp.s)
		return;
	bpf_loop(EVICT_QUEUE_LEN, kv_reap_step, &lp, 0);
	a->ret = lp.n;
}

/* For the client side of a veth pair: native XDP_TX frames are only received
 * by a peer that runs an XDP program itself. */
SEC("xdp")
int kv_xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
