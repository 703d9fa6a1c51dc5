package pagecachebench

// Parts are the experiments, in the order they run by default.
var Parts = []string{"search", "getscan", "overhead", "zipf"}

// RocksDBParts are the parts of --workload rocksdb (db_bench), in order.
var RocksDBParts = []string{"reads", "getscan", "percgroup"}

// The modes of each part, in the order they interleave; the report's rows
// are PART/MODE. "default" and "off" are the kernel's own LRU, untouched.
var (
	searchModes = []string{"default", "traced", "agent_mru", "agent_auto"}
	// (getscan, rocksdb getscan and percgroup: auto between two defaults,
	// judged against their mean, as in zipf and ycsb: autoTargets)
	getScanModes  = []string{"default", "agent_auto", "default_after", "agent_get_scan", "fadvise_noreuse", "fadvise_dontneed"}
	overheadModes = []string{"off", "agent_none", "agent_lru"}
	// --workload rocksdb
	rdbReadModes    = []string{"default", "traced", "agent_lfu", "agent_s3fifo", "agent_lhd", "agent_auto"}
	rdbGetScanModes = []string{"default", "agent_auto", "default_after", "agent_get_scan", "fadvise_noreuse", "fadvise_dontneed"}
	// (percgroup's agent_auto: an auto in each cgroup)
	rdbCgroupModes = []string{"default", "agent_auto", "default_after", "global_lfu", "global_mru", "tailored"}
	// --workload ycsb: every workload (ycsb.go)
	// (traced: the default with the access-trace recorder on, headroom.go;
	// auto between two defaults, judged against their mean: autoTargets)
	ycsbModes = []string{"default", "agent_auto", "default_after", "traced", "agent_lfu", "agent_s3fifo", "agent_lhd", "agent_wtinylfu"}
)

// rows are a part's modes as report rows (PART/MODE).
func rows(part string, modes []string) []string {
	out := make([]string, len(modes))
	for i, m := range modes {
		out[i] = part + "/" + m
	}
	return out
}
