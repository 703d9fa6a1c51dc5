// Package pagecachebench is `cistern bench pagecache`: the page-cache agent
// (package pagecache) against the kernel's own LRU in a memory cgroup.
//
// Workload, one part each (Parts): search, ripgrep over the Linux source in
// a cgroup limited to 70% of the tree (pagecache.go); getscan, a GET
// thread doing random 4 KiB preads over a hot file while a scanner reads a
// large file, in a child process (getscan.go, child.go, ramdisk.go);
// overhead, fio randread on a cached file (overhead.go). --workload rocksdb
// runs RocksDBParts instead on RocksDB's db_bench (rocksdb.go): skewed
// reads, GET-SCAN, and two cgroups with policies of their own.
// --workload ycsb (ycsb.go) runs YCSB's own workloads A, B, C, D, F and a
// uniform one (go-ycsb, its RocksDB binding) against RocksDB in a cgroup a
// quarter of the database; --quick runs C only and takes about 3
// minutes, not 60 s: 5 modes × 3 rounds of a warm-up (6 s, training the
// policies) and a measured go-ycsb process (4 s), each opening RocksDB,
// and the agent's start.
//
// Modes: searchModes, getScanModes, overheadModes and the rdb*Modes
// (modes.go); report rows are PART/MODE.
//
// Targets: search_speedup_mru >= 1.5; get_speedup >= 1.3 with
// scan_vs_default >= 0.7; cpu_per_io_overhead_pct <= 3; rocksdb: the
// rocksdb_* and percgroup_* targets in rocksdb.go; ycsb and zipf: the
// headroom targets (headroom.go, winTargets) on their traced mode's replay;
// every part but overhead has an agent_auto mode, judged by autoTargets
// (auto against the default: by its measured cost where it stood aside
// in every round, in every part but search; else on the part's own
// measure, the one its fixed policies are judged on: search's seconds,
// zipf's, ycsb's and rocksdb reads' ops/s, both GET-SCAN parts' GET
// ops/s; and against the best fixed policy of the part, GET-SCAN's agent
// in the GET-SCAN parts, where the fadvise modes are the application's
// advice, not policies). Per-cgroup runs an auto in each cgroup and
// judges each on its own workload's measure against that workload's best
// fixed configuration (autoTargetsOn). Where auto runs between two
// defaults (default, agent_auto, default_after: getscan, rocksdb getscan
// and percgroup, zipf, ycsb), it is judged against their mean. Each round
// reads its files once from the device after dropping them (pcDropWarm).
//
// live_vs_sim (headroomVerdicts, target <= 1.05): in ycsb the live side is
// the agent's own count of pages added to the watched files in the
// measured run (the tracker's pages_added, as the trace counts an add:
// 1 << order pages per folio charged to the cgroup), and the simulated
// side the same policy replayed at the agent's cache size on the round's
// trace with every page added outside a read (writes, readahead) put in
// as an access where it was added, from the exact trace event the
// measured run began at (roundTrace.withAdds, pctrace.AccessesAt): both
// count what entered the page cache, where memory.stat's pgpgin also
// counts go-ycsb's and the memtables' anonymous pages. pgpgin's figure
// stays beside it as PART_pgpgin_vs_sim_<policy>; zipf (fio's reads, no
// writes) still judges pgpgin's.
//
// Plot: every part's metrics relative to its default mode (pcPlot; rocksdb,
// its own bars in rocksdb.go).
package pagecachebench
