package pagecachebench

import (
	"io"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/pagecache"
)

// The agent's whole cost, as the kernel-path issue counts it: its thread's
// CPU plus the run time of its BPF programs, which run in the workload's
// own threads (bpf_stats, on while a measured run has an agent).

// agentMark is an agent's thread CPU and its programs' run time so far,
// and of that thread's CPU, the time it spent evicting (its fadvise calls
// and their checks: the part no policy and no BPF work can take off).
type agentMark struct{ thread, bpf, evict time.Duration }

func markAgent(a *pagecache.Agent) agentMark {
	if a == nil {
		return agentMark{}
	}
	m := agentMark{thread: a.ThreadCPU()}
	m.bpf, _, _ = a.ProgramRuntime()
	if st, err := a.Stats(); err == nil {
		m.evict = time.Duration(st["evict_cpu_us"]) * time.Microsecond
	}
	return m
}

// since is what the agent spent from m0 to m.
func (m agentMark) since(m0 agentMark) agentMark {
	return agentMark{thread: m.thread - m0.thread, bpf: m.bpf - m0.bpf, evict: m.evict - m0.evict}
}

func (m agentMark) total() time.Duration { return m.thread + m.bpf }

// bpfStats turns BPF run-time statistics on until the returned closer is
// closed (they cost every program two clock reads a run, so only runs
// with an agent have them); nil when there is no agent to measure.
func bpfStats(agents ...*pagecache.Agent) (io.Closer, error) {
	for _, a := range agents {
		if a != nil {
			return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		}
	}
	return nil, nil
}
