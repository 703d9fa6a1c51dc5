package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RocksDB is a RocksDB database built by db_bench (Debian's rocksdb-tools)
// once and kept in a cache directory, never in the repository: fillseq of
// Num keys of KeySize bytes with ValueSize-byte values, uncompressed, so
// the files are about Num × (KeySize + ValueSize) bytes.
type RocksDB struct {
	Dir       string // the database directory
	Num       int64
	KeySize   int
	ValueSize int
}

// RocksDBOptions configure PrepareRocksDB.
type RocksDBOptions struct {
	CacheDir  string // parent of the database (e.g. /var/cache/cistern/pagecache/rocksdb)
	Bytes     int64  // database size wanted (keys + values)
	ValueSize int    // default 1000
	Progress  func(string)
}

// dbMarker is written beside a database once db_bench has built it
// completely; a database without it is rebuilt from scratch.
type dbMarker struct {
	Num       int64 `json:"num"`
	KeySize   int   `json:"key_size"`
	ValueSize int   `json:"value_size"`
	Bytes     int64 `json:"bytes_on_disk"`
}

// DBBenchPath finds db_bench.
func DBBenchPath() (string, error) { return lookPath("db_bench") }

// PrepareRocksDB returns the cached database of about opt.Bytes, building
// it first if it is missing or incomplete (a few minutes for 4 GiB).
func PrepareRocksDB(ctx context.Context, opt RocksDBOptions) (*RocksDB, error) {
	bin, err := DBBenchPath()
	if err != nil {
		return nil, err
	}
	if opt.ValueSize == 0 {
		opt.ValueSize = 1000
	}
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	db := &RocksDB{KeySize: 16, ValueSize: opt.ValueSize}
	db.Num = opt.Bytes / int64(db.KeySize+db.ValueSize)
	name := fmt.Sprintf("db-%dM-v%d", opt.Bytes>>20, db.ValueSize)
	db.Dir = filepath.Join(opt.CacheDir, name)
	marker := db.Dir + ".complete"
	if b, err := os.ReadFile(marker); err == nil {
		var m dbMarker
		if json.Unmarshal(b, &m) == nil && m.Num == db.Num && m.ValueSize == db.ValueSize && m.KeySize == db.KeySize {
			return db, nil
		}
	}
	opt.Progress(fmt.Sprintf("rocksdb: building %s (%d keys of %d+%d bytes, once; kept in %s)",
		name, db.Num, db.KeySize, db.ValueSize, opt.CacheDir))
	os.Remove(marker)
	if err := os.RemoveAll(db.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return nil, err
	}
	// fillseq writes sorted, non-overlapping tables, so compaction only
	// moves them; no WAL, no compression (the files' size is the data's).
	args := append(db.args(), "--benchmarks=fillseq,waitforcompaction", "--use_existing_db=0",
		"--disable_wal=1", "--threads=1", "--compression_type=none")
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("db_bench fillseq: %v\n%s", err, tail(out, 2000))
	}
	if _, err := ParseDBBench(string(out), "fillseq"); err != nil {
		return nil, err
	}
	exec.CommandContext(ctx, "sync").Run() // clean pages can be dropped before each round
	files, size, err := db.Files()
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("db_bench fillseq wrote no table files in %s", db.Dir)
	}
	opt.Progress(fmt.Sprintf("rocksdb: built %s in %.0f s: %d table files, %d MiB", name, time.Since(t0).Seconds(), len(files), size>>20))
	b, _ := json.Marshal(dbMarker{Num: db.Num, KeySize: db.KeySize, ValueSize: db.ValueSize, Bytes: size})
	return db, os.WriteFile(marker, b, 0o644)
}

// args are the flags every db_bench run on db needs.
func (db *RocksDB) args() []string {
	return []string{"--db=" + db.Dir, "--num=" + strconv.FormatInt(db.Num, 10),
		"--key_size=" + strconv.Itoa(db.KeySize), "--value_size=" + strconv.Itoa(db.ValueSize)}
}

// Files lists the database's table files and their total size.
func (db *RocksDB) Files() ([]string, int64, error) {
	ents, err := os.ReadDir(db.Dir)
	if err != nil {
		return nil, 0, err
	}
	var files []string
	var size int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, 0, err
		}
		files = append(files, filepath.Join(db.Dir, e.Name()))
		size += info.Size()
	}
	return files, size, nil
}

// DBBenchRun is one read-only db_bench run on a RocksDB.
type DBBenchRun struct {
	Benchmark string        // readrandom, seekrandom, ...
	Threads   int           // default 1
	Duration  time.Duration // --duration (whole seconds, at least 1)
	CacheSize int64         // RocksDB's block cache (--cache_size); default 8 MiB
	// ExpRange is --read_random_exp_range: key = num × e^-r, r uniform in
	// [0, ExpRange], then scattered over the key space by a multiply: a
	// density ∝ 1/key over [num·e^-ExpRange, num], like Zipf with s = 1;
	// 0 reads uniformly.
	ExpRange  float64
	SeekNexts int    // seekrandom: Next() calls after each Seek
	Cgroup    string // cgroup directory the process runs in from its start ("" none)
	Extra     []string
}

// Command builds the db_bench process of r: read-only (several processes
// may share the database), reads through pread (not mmap, not O_DIRECT),
// with db_bench's latency histogram.
func (db *RocksDB) Command(ctx context.Context, r DBBenchRun) (*exec.Cmd, error) {
	bin, err := DBBenchPath()
	if err != nil {
		return nil, err
	}
	if r.Threads <= 0 {
		r.Threads = 1
	}
	if r.CacheSize <= 0 {
		r.CacheSize = 8 << 20
	}
	args := append(db.args(), "--benchmarks="+r.Benchmark, "--use_existing_db=1", "--readonly=1",
		"--threads="+strconv.Itoa(r.Threads),
		"--duration="+strconv.Itoa(max(1, int(r.Duration.Round(time.Second)/time.Second))),
		"--cache_size="+strconv.FormatInt(r.CacheSize, 10),
		// pread: the page-cache agent sees buffered reads, not mmap faults
		"--use_direct_reads=false", "--mmap_read=false",
		"--histogram=1", "--statistics=0")
	if r.ExpRange > 0 {
		args = append(args, "--read_random_exp_range="+strconv.FormatFloat(r.ExpRange, 'g', -1, 64))
	}
	if r.SeekNexts > 0 {
		// A scan's seek is long: check the duration after each one (the
		// default, every 1000 ops, ran a 1 s scan for 4 s).
		args = append(args, "--seek_nexts="+strconv.Itoa(r.SeekNexts), "--ops_between_duration_checks=1")
	}
	args = append(args, r.Extra...)
	return inCgroup(ctx, r.Cgroup, bin, args), nil
}

// inCgroup is the command bin args, run inside cgroup (a directory; ""
// none) from its first page: a shell joins it, then execs bin in place
// (same pid, so signals and GET-SCAN's scanner pid reach bin itself).
func inCgroup(ctx context.Context, cgroup, bin string, args []string) *exec.Cmd {
	var c *exec.Cmd
	if cgroup != "" {
		c = exec.CommandContext(ctx, "sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cgroup, bin}, args...)...)
	} else {
		c = exec.CommandContext(ctx, bin, args...)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return c
}

// DBBenchResult is what one db_bench benchmark printed.
type DBBenchResult struct {
	Benchmark   string
	OpsPerSec   float64
	MicrosPerOp float64
	Ops         int64   // operations done
	Seconds     float64 // the benchmark's own run time
	P50, P99    float64 // µs, from its histogram
	P999        float64
	MBPerSec    float64 // db_bench's bytes of keys and values read, per second
	Found       int64   // "(F of N found)"
}

var (
	reDBLine = regexp.MustCompile(`(?m)^(\w+)\s*:\s*([\d.]+) micros/op (\d+) ops/sec(?: ([\d.]+) seconds (\d+) operations;)?(?:\s*([\d.]+) MB/s)?.*?(?:\((\d+) of (\d+) found\))?$`)
	reDBPct  = regexp.MustCompile(`Percentiles: P50: ([\d.]+) P75: [\d.]+ P99: ([\d.]+) P99\.9: ([\d.]+)`)
)

// ParseDBBench reads db_bench's result line for benchmark (ops/s, µs/op)
// and the percentiles of the histogram printed after it (--histogram).
func ParseDBBench(out, benchmark string) (DBBenchResult, error) {
	r := DBBenchResult{Benchmark: benchmark}
	for _, loc := range reDBLine.FindAllStringSubmatchIndex(out, -1) {
		m := func(i int) string {
			if loc[2*i] < 0 {
				return ""
			}
			return out[loc[2*i]:loc[2*i+1]]
		}
		if m(1) != benchmark {
			continue
		}
		r.MicrosPerOp, _ = strconv.ParseFloat(m(2), 64)
		r.OpsPerSec, _ = strconv.ParseFloat(m(3), 64)
		r.Seconds, _ = strconv.ParseFloat(m(4), 64)
		r.Ops, _ = strconv.ParseInt(m(5), 10, 64)
		r.MBPerSec, _ = strconv.ParseFloat(m(6), 64)
		r.Found, _ = strconv.ParseInt(m(7), 10, 64)
		if p := reDBPct.FindStringSubmatch(out[loc[1]:]); p != nil {
			r.P50, _ = strconv.ParseFloat(p[1], 64)
			r.P99, _ = strconv.ParseFloat(p[2], 64)
			r.P999, _ = strconv.ParseFloat(p[3], 64)
		}
		if r.OpsPerSec <= 0 && r.Ops <= 0 {
			break
		}
		return r, nil
	}
	return r, fmt.Errorf("db_bench printed no %s result:\n%s", benchmark, tail([]byte(out), 1500))
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
