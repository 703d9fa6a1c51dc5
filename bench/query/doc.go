// Package querybench is `cistern bench query`: SQL queries on the syscalls
// table (package query) against the hand-written reference
// (bench/queryref) and bpftrace.
//
// Workload: fio, 4 KiB random reads with ioengine=psync on a 64 MiB file
// in the page cache, in its own cgroup (fio.go), untraced and under two
// queries: q1, the maximum latency per pid and syscall per 1 s window; q2,
// every syscall's latency written to a file. --workload rocksdb runs
// RocksDB's db_bench readrandom instead (rocksdb.go).
//
// Modes: Modes (hand_written, optimizer, mvsf_only, bpftrace), each filtered
// to fio's cgroup; untraced always runs (modes.go starts each, engine.go
// runs the query compiler).
//
// Targets (queryTargets): the optimizer's BPF run time per read at most
// 1.2 times the hand-written program's on q1 (per-round ratios: a
// difference in points of fio's CPU moved with the machine, issue #34), its
// kernel cost within 3 points of it on q2; no lost events and every pread64
// in q2; q1 maxima that agree with the reference.
//
// Plot: the probe effect on fio per mode and query (the end of Run).
package querybench
