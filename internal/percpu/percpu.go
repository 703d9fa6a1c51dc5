// Package percpu reads the per-CPU counter arrays every Cistern BPF object
// keeps its statistics in (a PERCPU_ARRAY of u64, one slot per counter).
package percpu

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Sum reads slots 0..len(names)-1 of m, sums each over the CPUs, and
// returns them by name.
func Sum(m *ebpf.Map, names []string) (map[string]uint64, error) {
	out := make(map[string]uint64, len(names))
	var per []uint64
	for i, name := range names {
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read %s slot %d: %w", m.String(), i, err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}
