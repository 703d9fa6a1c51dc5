// Package kvbench is `cistern bench kv`: Kerby-KV (package kv) against
// memcached alone and against fixed-size slots.
//
// Workload: a server and a client network namespace joined by veth
// (internal/netenv), a real memcached over UDP in the server namespace,
// 8-byte keys, values 75% 128 B and 25% 1024 B, zipfian popularity
// (kv.go). Two load generators: the kernel one (BPF_PROG_RUN with XDP live
// frames, internal/kvgen), which gives the headline rows, and the Go one
// (internal/loadgen, rows "user-space MODE"). With --trace twitter the
// bench instead replays the Twitter trace look-aside once per eviction
// policy (trace.go, Trace).
//
// Modes: Modes (vanilla, fixed128, fixed1024, kerby), plus the bare XDP_TX
// reflector beside them with the kernel generator; trace mode: "ring" and
// the eviction policies. TCP rows (tcp.go): "tcp vanilla" and "tcp kerby",
// GETs on memcached's TCP connections from a client that checks every value
// and the order of the replies (16 connections, 4 GETs pipelined each).
//
// Targets (kvBench.targets): kerby's throughput against each other mode
// and the reflector, kerby's p99 against vanilla's, memory efficiency
// (kerby >= 0.90, fixed1024 <= 0.40) and no wrong values; TCP
// (kvBench.tcpTargets): GETs/s >= 1.5x and server CPU per GET (memcached,
// softirq and kernel workers) <= 0.5x memcached alone, p99 <= its, no wrong
// values, no reply out of order.
//
// Plot: throughput per mode for the kernel generator and each skew of the
// user-space client (plot.go, plotKV); trace mode, the kernel hit ratio
// per policy beside the offline replay.
package kvbench
