// SPDX-License-Identifier: GPL-2.0
/*
 * capture.bpf.c - the capture agent's programs, in one object so that its
 * three sources share one channel, one connection-id counter and the maps
 * that tell TLS sockets from plaintext ones (conn.bpf.h):
 *   tls.bpf.h    libssl's SSL_read/SSL_write (uprobes);
 *   gotls.bpf.h  Go's crypto/tls (*Conn).Read/Write (uprobes at entry and
 *                at each RET);
 *   plain.bpf.h  socket syscalls (tracepoints), skipping TLS sockets;
 *   attach.bpf.h exec and libssl opens, announced to the agent so that it
 *                attaches at once (and --hold-new), and unread TLS
 *                connections, on the control ring cap_ctl.
 * The loader attaches what --transport asks for; the tracepoints are
 * attached in every case, since they are also what ties a TLS connection
 * to its socket (addresses). cap_want_tls / cap_want_plain (frozen .rodata)
 * say which bytes go to the channel.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
/* PT_REGS_* need the architecture; this tree builds for x86-64 (bpfel). */
#if !defined(__TARGET_ARCH_x86) && !defined(__TARGET_ARCH_arm64)
#define __TARGET_ARCH_x86
#endif
#include <bpf/bpf_tracing.h>

#include "cistern/accum.bpf.h"
#include "cistern/taskstack.bpf.h"
#include "select.bpf.h"
#include "conn.bpf.h"
#include "attach.bpf.h"
#include "tls.bpf.h"
#include "gotls.bpf.h"
#include "plain.bpf.h"

char LICENSE[] SEC("license") = "GPL";

static long go_gone_cb(void *map, struct cap_obj_key *k, __u64 *id, __u32 *tgid)
{
	if (k->pid == *tgid) {
		accum_close(*id);
		bpf_map_delete_elem(map, k);
	}
	return 0;
}

/* Every connection of an exiting process ends (select.bpf.h). */
static void cap_proc_gone(__u32 tgid)
{
	bpf_for_each_map_elem(&ssl_conns, ssl_gone_cb, &tgid, 0);
	bpf_for_each_map_elem(&go_conns, go_gone_cb, &tgid, 0);
	bpf_for_each_map_elem(&plain_fds, plain_gone_cb, &tgid, 0);
	bpf_for_each_map_elem(&cap_tls_fds, tls_gone_cb, &tgid, 0);
	bpf_map_delete_elem(&cap_tls_procs, &tgid);
	if (cap_hold) {
		bpf_map_delete_elem(&cap_held, &tgid);
		bpf_map_delete_elem(&cap_held_parent, &tgid);
		bpf_map_delete_elem(&cap_sup, &tgid);
	}
}
