// Package cbufbench is `cistern bench cbuf`: CBUF (packages cbuf and
// lib/cbuf) against malloc, pipes, sockets and iceoryx2, and its pool
// policies.
//
// Workload: an in-process manager per experiment and C peers built from
// peer/cbufbench.c against libcbuf (and jemalloc when installed), plus an
// iceoryx2 peer built with cargo from iox2/ (build.go). The web workload
// (web.go) builds examples/cbufweb with go build and runs it as a program
// (webprog.go), as its users would.
//
// Modes: the experiments are Parts (fast, rtt, gc, policy). fast compares
// fast_cbuf with glibc and jemalloc malloc; rtt's modes are rttModes
// (cbuf_poll, cbuf_block, pipe, unix_socket, iceoryx2_poll,
// iceoryx2_block, the blocking ones also _1core); gc sweeps the pool size;
// policy's rows are policyModes, one per entry of policies (policy.go).
//
// Targets: cached alloc+free at one page no slower than glibc's
// malloc+free timed by the same peer in the same round (the median of the
// per-round ratios <= 1.0; the nanoseconds, which move with the machine,
// stay reported in fast_cbuf); cbuf round trips
// against pipes (cbufRTT); the qos policy's deviation from its target
// (cbufPolicies).
//
// Plot: the producer's throughput over time under each policy, and
// FILE-rtt.png the round trips (plotCBufRTT).
package cbufbench
