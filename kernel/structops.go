package kernel

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// bpfFLink is BPF_F_LINK: a struct_ops map registered through a link.
const bpfFLink = 1 << 13

// probeStructOps creates an empty tcp_congestion_ops map (nothing is
// registered until its value is set).
func probeStructOps() error { return structOpsMap(0) }

// probeStructOpsLink creates one that asks for a link.
func probeStructOpsLink() error {
	if err := StructOps(); err != nil {
		return err
	}
	err := structOpsMap(bpfFLink)
	if errors.Is(err, unix.EINVAL) {
		return errTooOld
	}
	return err
}

func structOpsMap(flags uint32) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "cistern_probe",
		Type:       ebpf.StructOpsMap,
		Flags:      flags,
		KeySize:    4,
		MaxEntries: 1,
		Key:        &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Value:      &btf.Struct{Name: "tcp_congestion_ops"},
	})
	if err != nil {
		return err
	}
	return m.Close()
}

// AdaptStructOps turns the struct_ops maps of spec that ask for a link
// into the form kernels without struct_ops links accept (no BPF_F_LINK),
// when StructOpsLink says links are missing. Such a map registers its
// value as it is created: the caller must unregister it with
// UnregisterStructOps before closing it. It returns the names of the maps
// it changed (none where links work).
func AdaptStructOps(spec *ebpf.CollectionSpec) []string {
	if err := StructOpsLink(); err == nil || !errors.Is(err, ErrMissing) {
		return nil
	}
	var names []string
	for name, m := range spec.Maps {
		if m.Type == ebpf.StructOpsMap && m.Flags&bpfFLink != 0 {
			m.Flags &^= bpfFLink
			names = append(names, name)
		}
	}
	return names
}

// UnregisterStructOps unregisters a struct_ops map registered without a
// link (deleting its only element), as AdaptStructOps's maps need.
func UnregisterStructOps(m *ebpf.Map) error {
	if err := m.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister struct_ops map %s: %w", m.String(), err)
	}
	return nil
}
