package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GoYCSBBin is go-ycsb (github.com/pingcap/go-ycsb: YCSB's core workload
// and generators in Go) built with its RocksDB binding by
// scripts/go-ycsb.sh (make deps).
const GoYCSBBin = "/usr/local/lib/cistern/go-ycsb"

// GoYCSBPath finds go-ycsb.
func GoYCSBPath() (string, error) {
	if _, err := os.Stat(GoYCSBBin); err != nil {
		return "", fmt.Errorf("go-ycsb (%s) %w: run sudo make deps (scripts/go-ycsb.sh builds it)", GoYCSBBin, ErrNotInstalled)
	}
	return GoYCSBBin, nil
}

// YCSBDB is a RocksDB database loaded by go-ycsb's own load phase (YCSB's
// usertable: Records records of 10 fields of 100 bytes, keys hashed), once,
// into a cache directory and fully compacted there; runs use a clone
// (Clone) so that the loaded database stays as it was.
type YCSBDB struct {
	Dir     string
	Records int64
}

// YCSBDBOptions configure PrepareYCSB.
type YCSBDBOptions struct {
	CacheDir string // parent of the database (e.g. /var/cache/cistern/pagecache/ycsb)
	Records  int64
	Progress func(string)
}

// ycsbMarker is written beside a database once it is loaded and compacted;
// a database without it is loaded again from scratch.
type ycsbMarker struct {
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes_on_disk"`
}

// ycsbCommon are the properties of every go-ycsb process: its pprof
// listener (on by default, on :6060 of every interface) on a loopback port
// of the kernel's choosing, and no periodic summaries (one result at the end).
func ycsbCommon(dir string) []string {
	return []string{"-p", "rocksdb.dir=" + dir, "-p", "debug.pprof=127.0.0.1:0", "-p", "workload=core",
		"-p", "outputstyle=plain", "--interval", "86400"}
}

// PrepareYCSB returns the cached database of opt.Records records, loading
// it first with `go-ycsb load rocksdb` if it is missing or incomplete, then
// compacting it fully (RocksDB's ldb compact), so that runs start from one
// sorted level and no compaction left over from the load.
func PrepareYCSB(ctx context.Context, opt YCSBDBOptions) (*YCSBDB, error) {
	bin, err := GoYCSBPath()
	if err != nil {
		return nil, err
	}
	ldb, err := lookPath("ldb") // rocksdb-tools, as db_bench
	if err != nil {
		return nil, err
	}
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	db := &YCSBDB{Records: opt.Records, Dir: filepath.Join(opt.CacheDir, fmt.Sprintf("usertable-%d", opt.Records))}
	marker := db.Dir + ".complete"
	if b, err := os.ReadFile(marker); err == nil {
		var m ycsbMarker
		if json.Unmarshal(b, &m) == nil && m.Records == db.Records {
			return db, nil
		}
	}
	opt.Progress(fmt.Sprintf("ycsb: loading %d records into %s with go-ycsb (once)", db.Records, db.Dir))
	os.Remove(marker)
	if err := os.RemoveAll(db.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return nil, err
	}
	t0 := time.Now()
	args := append([]string{"load", "rocksdb"}, ycsbCommon(db.Dir)...)
	args = append(args, "-p", "recordcount="+strconv.FormatInt(db.Records, 10), "--threads", "4")
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go-ycsb load: %v\n%s", err, tail(out, 2000))
	}
	res, err := ParseGoYCSB(string(out))
	if err != nil {
		return nil, fmt.Errorf("go-ycsb load: %w", err)
	}
	if ins := res.Ops["INSERT"]; ins.Count != db.Records || res.Ops["INSERT_ERROR"].Count > 0 {
		return nil, fmt.Errorf("go-ycsb load inserted %d of %d records (%d errors)", ins.Count, db.Records, res.Ops["INSERT_ERROR"].Count)
	}
	opt.Progress(fmt.Sprintf("ycsb: loaded in %.0f s; compacting", time.Since(t0).Seconds()))
	if out, err := exec.CommandContext(ctx, ldb, "--db="+db.Dir, "compact").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ldb compact: %v\n%s", err, tail(out, 2000))
	}
	exec.CommandContext(ctx, "sync").Run() // clean pages can be dropped before each round
	files, size, err := db.Files()
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("go-ycsb load wrote no table files in %s", db.Dir)
	}
	opt.Progress(fmt.Sprintf("ycsb: %d records in %.0f s: %d table files, %d MiB", db.Records, time.Since(t0).Seconds(), len(files), size>>20))
	b, _ := json.Marshal(ycsbMarker{Records: db.Records, Bytes: size})
	return db, os.WriteFile(marker, b, 0o644)
}

// Files lists the database's table files and their total size.
func (db *YCSBDB) Files() ([]string, int64, error) {
	return (&RocksDB{Dir: db.Dir}).Files()
}

// Clone makes dst a copy of the database that a run may write: table files
// are hard links (RocksDB never changes one in place: compaction writes new
// ones and unlinks the old), the rest (manifest, options, current, WAL) is
// copied. What a clone's run writes never reaches the loaded database.
func (db *YCSBDB) Clone(dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(db.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		src, to := filepath.Join(db.Dir, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case !e.Type().IsRegular(), e.Name() == "LOCK", strings.HasPrefix(e.Name(), "LOG"):
			continue
		case strings.HasSuffix(e.Name(), ".sst"):
			err = os.Link(src, to)
		default:
			err = copyFile(src, to)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// YCSBWriteBuffer is the memtable size of every run (RocksDB's
// write_buffer_size), in bytes.
const YCSBWriteBuffer = 8 << 20

// YCSBRun is one `go-ycsb run rocksdb` on a database directory.
type YCSBRun struct {
	Dir     string            // the database (a clone: runs may write)
	Records int64             // recordcount of the loaded database
	Props   map[string]string // the workload: YCSB core properties (readproportion, requestdistribution, ...)
	Threads int               // client threads (default 1)
	Cgroup  string            // cgroup directory the process runs in from its start ("" none)
}

// Command builds the go-ycsb process of r. go-ycsb has no time limit
// (maxexecutiontime is not read): the caller stops it with SIGINT, after
// which it prints its measurements and exits 0. RocksDB reads through pread
// (rocksdb.allow_mmap_reads and rocksdb.use_direct_reads false, the
// binding's defaults, set here so that they stay so) and its block cache is
// RocksDB's default 8 MiB (the binding sets none). Its memtable is capped at
// YCSBWriteBuffer: the binding's 64 MiB (two of them while one flushes) is
// anonymous memory charged to the run's cgroup, and grew past a 64 MiB
// cgroup's limit within two seconds of workload A (the OOM killer ended
// go-ycsb in CI).
func (r YCSBRun) Command(ctx context.Context) (*exec.Cmd, error) {
	bin, err := GoYCSBPath()
	if err != nil {
		return nil, err
	}
	if r.Threads <= 0 {
		r.Threads = 1
	}
	args := append([]string{"run", "rocksdb"}, ycsbCommon(r.Dir)...)
	args = append(args, "--threads", strconv.Itoa(r.Threads),
		"-p", "recordcount="+strconv.FormatInt(r.Records, 10),
		"-p", "operationcount=1000000000000", // stopped by SIGINT, never by the count
		"-p", "rocksdb.allow_mmap_reads=false", "-p", "rocksdb.use_direct_reads=false",
		"-p", "rocksdb.write_buffer_size="+strconv.Itoa(YCSBWriteBuffer))
	keys := make([]string, 0, len(r.Props))
	for k := range r.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-p", k+"="+r.Props[k])
	}
	c := inCgroup(ctx, r.Cgroup, bin, args)
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGKILL) }
	return c, nil
}

// YCSBOp is one operation's row of go-ycsb's measurements (latencies in µs).
type YCSBOp struct {
	Seconds   float64 // Takes(s): from the operation's first measurement to the output
	Count     int64
	OpsPerSec float64
	Avg, P50  float64
	P99, P999 float64
	Max       float64
}

// YCSBResult is what one go-ycsb process printed at its end, per
// operation (READ, UPDATE, INSERT, SCAN, READ_MODIFY_WRITE, TOTAL, and
// NAME_ERROR for failed ones).
type YCSBResult struct {
	Ops map[string]YCSBOp
}

var (
	reYCSBLine  = regexp.MustCompile(`(?m)^([A-Z_]+)\s+- (Takes\(s\): .*)$`)
	reYCSBField = regexp.MustCompile(`([\w.()]+): ([\d.]+)`)
)

// ParseGoYCSB reads the measurements go-ycsb prints after "Run finished"
// (outputstyle plain: "READ   - Takes(s): 10.0, Count: 1234, OPS: 123.4,
// Avg(us): ..., 99th(us): ..."); periodic summaries before it are ignored.
func ParseGoYCSB(out string) (YCSBResult, error) {
	r := YCSBResult{Ops: map[string]YCSBOp{}}
	i := strings.LastIndex(out, "Run finished")
	if i < 0 {
		return r, fmt.Errorf("go-ycsb printed no \"Run finished\" line:\n%s", tail([]byte(out), 1500))
	}
	for _, m := range reYCSBLine.FindAllStringSubmatch(out[i:], -1) {
		var op YCSBOp
		for _, f := range reYCSBField.FindAllStringSubmatch(m[2], -1) {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return r, fmt.Errorf("go-ycsb %s: %s: %w", m[1], f[0], err)
			}
			switch f[1] {
			case "Takes(s)":
				op.Seconds = v
			case "Count":
				op.Count = int64(v)
			case "OPS":
				op.OpsPerSec = v
			case "Avg(us)":
				op.Avg = v
			case "50th(us)":
				op.P50 = v
			case "99th(us)":
				op.P99 = v
			case "99.9th(us)":
				op.P999 = v
			case "Max(us)":
				op.Max = v
			}
		}
		r.Ops[m[1]] = op
	}
	if len(r.Ops) == 0 {
		return r, fmt.Errorf("go-ycsb printed no measurements after \"Run finished\":\n%s", tail([]byte(out[i:]), 1500))
	}
	return r, nil
}

// Errors is how many operations failed (the NAME_ERROR rows).
func (r YCSBResult) Errors() int64 {
	var n int64
	for k, op := range r.Ops {
		if strings.HasSuffix(k, "_ERROR") {
			n += op.Count
		}
	}
	return n
}
