// Package accum is the user-space side of the accumulating channel in
// bpf/include/cistern/accum.bpf.h.
//
// # What the channel is
//
// A capture hook (SSL_write/SSL_read uprobes, send/recv tracepoints) sees a
// stream as many small fragments. Sending each as its own ring-buffer event
// with its metadata, in a fixed 1 KiB slot, spends 50 ring bytes per byte of
// a 20-byte fragment. accum_write batches fragments per connection in the
// kernel; a batch leaves as one record (Record: the metadata once, then
// segments of bytes per direction) sized to what it holds, when it reaches
// the flush size, when the pid, tid or protocol changes, on close, or after
// the latency bound (a bpf_timer, default 10 ms). Measured here: 1.16 ring
// bytes per payload byte for 20-byte request/response fragments at flush
// size 1024, 1.12 at 4096.
//
// Loss is never silent: a record the ring cannot take consumes a
// per-connection sequence number and is counted (Stats.LostRecords,
// LostBytes); Reassembler reports every gap (Gap).
//
// # Using it from your own BPF program
//
//	#include "cistern/accum.bpf.h"
//	accum_write(conn_id, (u64)buf, len, ACCUM_PIDTID(pid, tid),
//	            ACCUM_META(dir, proto, 1 /* user memory */));
//	accum_close(conn_id);
//
// In Go, configure the collection spec before loading, arm the timer, read:
//
//	cfg := accum.Config{FlushSize: 1024, Latency: 10 * time.Millisecond}
//	cfg.Apply(spec)                        // .rodata constants + map sizes
//	coll, _ := ebpf.NewCollection(spec)
//	accum.Start(coll)                      // the latency bound
//	r, _ := accum.NewReader(coll.Maps["accum_ring"])
//	rec, err := r.Read(100 * time.Millisecond)   // r.Streams reassembles
//	st, _ := accum.ReadStats(coll.Maps["accum_stats"])
//
// # From user space
//
// OpenDriver loads bpf/accum/driver.bpf.c, whose CISTERN_CALL programs
// (kernel.Call) feed fragments from a staging map to accum_write:
// the very code a hook runs, for tests and measurements.
package accum
