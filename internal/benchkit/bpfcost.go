package benchkit

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf"
)

// BPFRunTimes reads, per program ID, the run time since the statistics
// were enabled (ebpf.EnableStats with BPF_STATS_RUN_TIME) of every BPF
// program loaded on the machine.
func BPFRunTimes() (map[ebpf.ProgramID]time.Duration, error) {
	out := map[ebpf.ProgramID]time.Duration{}
	id := ebpf.ProgramID(0)
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		st, err := p.Stats()
		p.Close()
		if err == nil {
			out[id] = st.Runtime
		}
	}
}

// BPFRunTimeSince is what the programs ran between the reading before and
// now: per program, its growth, or all of its run time if it was loaded
// meanwhile. A program unloaded meanwhile is left out, not subtracted (a
// total over all programs went negative when the previous mode's
// programs went away during a run).
func BPFRunTimeSince(before map[ebpf.ProgramID]time.Duration) (time.Duration, error) {
	now, err := BPFRunTimes()
	if err != nil {
		return 0, err
	}
	var d time.Duration
	for id, rt := range now {
		if rt > before[id] {
			d += rt - before[id]
		}
	}
	return d, nil
}

// BPFRunTimeOf is what the programs of before (by ID, with their run times
// then) ran since: programs loaded since, and those of other processes, are
// left out.
func BPFRunTimeOf(before map[ebpf.ProgramID]time.Duration) (time.Duration, error) {
	var d time.Duration
	for id, rt := range before {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			return 0, err
		}
		if st.Runtime > rt {
			d += st.Runtime - rt
		}
	}
	return d, nil
}
