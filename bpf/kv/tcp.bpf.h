/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcp.bpf.h - GETs on memcached's TCP connections answered in the kernel
 * (part of kv.bpf.c): the argument, and kv_sockops. The verdict and the
 * set path are in tcp_verdict.bpf.h, sk_msg in tcp_msg.bpf.h.
 * docs/kerby-kv.md, "TCP", has the argument.
 *
 *   kv_sockops      (cgroup sockops) memcached's accepted connections, in
 *                   the server's network namespace, go into kv_socks at
 *                   PASSIVE_ESTABLISHED, before any byte arrives; their
 *                   state (kv_conns) goes at close.
 *   kv_tcp_verdict  (sk_skb verdict, no strparser) every segment the client
 *                   sends. A segment made only of GETs whose keys are all
 *                   cached, on a connection with no request waiting on
 *                   memcached, is answered: the reply is staged (kv_conn.st),
 *                   the segment's first bytes are overwritten with a marker
 *                   and it is redirected to the socket's own egress.
 *                   Everything else goes to memcached unchanged (SK_PASS),
 *                   after its requests were counted and its writes
 *                   invalidated.
 *   kv_tcp_msg      (sk_msg) every send on those sockets: a marked segment
 *                   (sent by the sockmap's worker) is replaced by its staged
 *                   reply; memcached's own replies are counted (the order
 *                   rule) and fill the pool when a GET of ours missed.
 *
 * The verdict cannot grow the segment it redirects: the bytes it consumed
 * are accounted by its length (copied_seq), so the reply is swapped in on
 * the way out, where bpf_msg_push_data may grow it.
 *
 * Order. A kernel reply may leave only when every reply memcached owes on
 * the connection has left: kv_conn.pending counts the requests handed to
 * memcached that want a reply (noreply ones do not) and kv_tcp_msg takes one
 * off for each reply line memcached sends (END, STORED, ...; VALUE lines
 * and their data are not ends). A redirected segment is queued on the
 * socket's psock (ingress_skb) and every later segment, passed or not, is
 * queued behind it, so memcached reads the next request only after the
 * kernel's reply went out. Verdict and sk_msg run under the socket's lock,
 * so kv_conn needs no other.
 *
 * A stream the programs cannot follow (a stats command, a meta command with
 * the q flag, a line longer than the buffer, a reply line split between two
 * sends, ...) makes the connection blind: no kernel hit on it again, every
 * byte to memcached as sent (tcp_blind).
 */

/* A port as the context holds it, in network order; the remote port of
 * sockops, sk_skb and sk_msg contexts sits in the upper half. */
static __always_inline __u32 norm_port(__u32 p)
{
	return p > 0xffff ? p >> 16 : p;
}

SEC("sockops")
int kv_sockops(struct bpf_sock_ops *skops)
{
	struct kv_conn_key k = {};
	__u32 lport = skops->local_port;
	__u64 *netns;

	barrier_var(lport);
	if (skops->family != 2 /* AF_INET */ || lport != kv_port)
		return 1;
	/* memcached of this serve only: the cookie of its network namespace,
	 * written by the loader at attach (0: none yet, take nothing) */
	netns = clock_slot(KV_CLOCK_NETNS);
	if (!netns || !*netns || bpf_get_netns_cookie(skops) != *netns)
		return 1;
	k.lip = skops->local_ip4;
	k.rip = skops->remote_ip4;
	k.lport = lport;
	k.rport = norm_port(skops->remote_port);
	switch (skops->op) {
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: {
		__u32 z = 0;
		struct kv_conn *zero = bpf_map_lookup_elem(&kv_conn_zero, &z);

		if (!zero)
			return 1;
		bpf_map_delete_elem(&kv_conns, &k);
		if (bpf_map_update_elem(&kv_conns, &k, zero, BPF_NOEXIST) == 0 &&
		    bpf_sock_hash_update(skops, &kv_socks, &k, BPF_NOEXIST) == 0) {
			stat(KV_TCP_CONNS);
			bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_STATE_CB_FLAG);
		}
		return 1;
	}
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == BPF_TCP_CLOSE || skops->args[1] == BPF_TCP_CLOSE_WAIT ||
		    skops->args[1] == BPF_TCP_FIN_WAIT1)
			bpf_map_delete_elem(&kv_conns, &k);
		return 1;
	}
	return 1;
}

static __always_inline void conn_blind(struct kv_conn *c)
{
	if (!c->blind)
		stat(KV_TCP_BLIND);
	c->blind = 1;
}
