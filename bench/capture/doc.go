// Package capturebench is `cistern bench capture`: the accumulated capture
// channel (packages capture and accum) against the naive one, one fixed
// 1 KiB ring record per SSL fragment (bench/capture/naive).
//
// Workload: PostgreSQL over TLS on loopback (internal/servers), pgbench -S
// at full rate (capture.go); MariaDB over TLS with sysbench
// oltp_point_select (mariadb.go); TLS connections that open and close
// (churn.go); execs of new copies of a Go program and of libssl, timed
// from the kernel's exec (or open) to the uprobes attached, with and
// without --hold-new (attach.go).
//
// Modes: Modes, in order (untraced, naive, accumulated, each traced mode
// also with a 4 MiB ring (_4m), bpftrace, the sysbench modes, churn and
// attach). Options.HoldNew runs the accumulated and churn captures with
// --hold-new.
//
// Targets (the end of Run and churnTotals.targets): accumulated captures
// every query and loses no event; its ring carries <= 1.2 bytes per
// payload byte; its agent uses <= 1/3 of the naive agent's CPU per query
// sent, the ratio taken within each round (cpuPerQueryRatio: each agent's
// CPU share follows pgbench's rate, which the machine sets); its probe
// effect is within 5 points of bpftrace's; the same for sysbench and churn.
//
// Plot: pgbench -S transactions per second per mode, sysbench left out
// (the end of Run).
package capturebench
