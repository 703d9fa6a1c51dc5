package pagecachebench

// Parts are the experiments, in the order they run by default.
var Parts = []string{"search", "getscan", "overhead", "zipf"}

// RocksDBParts are the parts of --workload rocksdb (db_bench), in order.
var RocksDBParts = []string{"reads", "getscan", "percgroup"}

// The modes of each part, in the order they interleave; the report's rows
// are PART/MODE. "default" and "off" are the kernel's own LRU, untouched.
var (
	searchModes   = []string{"default", "agent_mru"}
	getScanModes  = []string{"default", "agent_get_scan", "fadvise_noreuse", "fadvise_dontneed"}
	overheadModes = []string{"off", "agent_none", "agent_lru"}
	// --workload rocksdb
	rdbReadModes    = []string{"default", "agent_lfu", "agent_s3fifo", "agent_lhd"}
	rdbGetScanModes = []string{"default", "agent_get_scan", "fadvise_noreuse", "fadvise_dontneed"}
	rdbCgroupModes  = []string{"default", "global_lfu", "global_mru", "tailored"}
)

// rows are a part's modes as report rows (PART/MODE).
func rows(part string, modes []string) []string {
	out := make([]string, len(modes))
	for i, m := range modes {
		out[i] = part + "/" + m
	}
	return out
}
