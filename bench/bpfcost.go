package bench

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf"
)

// bpfRunTime is the run time, since the statistics were enabled
// (ebpf.EnableStats with BPF_STATS_RUN_TIME), of every BPF program loaded on
// the machine: the difference of two readings around a run is what the
// programs that ran meanwhile cost, in the context of whoever triggered
// them. Programs that go away between the readings are not counted.
func bpfRunTime() (time.Duration, error) {
	var total time.Duration
	id := ebpf.ProgramID(0)
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return total, nil
		}
		if err != nil {
			return 0, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		st, err := p.Stats()
		p.Close()
		if err == nil {
			total += st.Runtime
		}
	}
}
