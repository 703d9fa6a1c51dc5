package accum

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/cistern-ebpf/cistern/internal/percpu"
)

// StatNames are the accum_stats slots, in enum accum_stat order.
var StatNames = []string{
	"records", "ring_bytes", "payload_bytes", "lost_records", "lost_bytes",
	"busy_drops", "no_conn", "faults", "context_flushes", "timer_flushes", "wakeups",
	"late_wakeups",
}

// Stats are the kernel side's counters, summed over the CPUs.
type Stats struct {
	Records        uint64 // records written to the ring
	RingBytes      uint64 // ring bytes they took, 8-byte ring headers and padding included
	PayloadBytes   uint64 // fragment bytes they carried
	LostRecords    uint64 // records the ring could not take
	LostBytes      uint64 // fragment bytes lost for any reason
	BusyDrops      uint64 // fragments dropped: connection held elsewhere too long
	NoConn         uint64 // fragments dropped: connection table full
	Faults         uint64 // failed reads of a fragment's source
	ContextFlushes uint64 // flushes for a pid/tid/protocol change
	TimerFlushes   uint64 // flushes by the latency bound
	Wakeups        uint64 // forced reader wakeups
	LateWakeups    uint64 // of them, the latency timer's for records written without one
}

// RingPerPayload is ring bytes per payload byte (0 without payload).
func (s Stats) RingPerPayload() float64 {
	if s.PayloadBytes == 0 {
		return 0
	}
	return float64(s.RingBytes) / float64(s.PayloadBytes)
}

// ReadStats reads accum_stats.
func ReadStats(m *ebpf.Map) (Stats, error) {
	v, err := percpu.Sum(m, StatNames)
	if err != nil {
		return Stats{}, fmt.Errorf("accum stats: %w", err)
	}
	return Stats{
		Records: v["records"], RingBytes: v["ring_bytes"], PayloadBytes: v["payload_bytes"],
		LostRecords: v["lost_records"], LostBytes: v["lost_bytes"], BusyDrops: v["busy_drops"],
		NoConn: v["no_conn"], Faults: v["faults"], ContextFlushes: v["context_flushes"],
		TimerFlushes: v["timer_flushes"], Wakeups: v["wakeups"], LateWakeups: v["late_wakeups"],
	}, nil
}
