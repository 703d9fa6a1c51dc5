package bpfcheck

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// Layout compares the Go struct v, a mirror of a C struct, with that
// struct's BTF (typ, from a BPF object): the same size, as many members,
// and member by member, in order, the same offset, the same size and the
// same name (the Go field's name lower-cased, or its `btf:"name"` tag). It
// returns every difference, joined; nil when the mirror is exact. Mirrors
// of structs built with -no-global-types take typ from a map's key or
// value, whose BTF the object keeps.
func Layout(typ btf.Type, v any) error {
	st, ok := btf.UnderlyingType(typ).(*btf.Struct)
	if !ok {
		return fmt.Errorf("%v is not a struct", typ)
	}
	gt := reflect.TypeOf(v)
	if gt.Kind() != reflect.Struct {
		return fmt.Errorf("%T is not a struct", v)
	}
	var errs []error
	if size, err := btf.Sizeof(st); err != nil || uintptr(size) != gt.Size() {
		errs = append(errs, fmt.Errorf("struct %s: %d bytes in C, %d in Go (%T)", st.Name, size, gt.Size(), v))
	}
	if len(st.Members) != gt.NumField() {
		errs = append(errs, fmt.Errorf("struct %s: %d members in C, %d fields in Go", st.Name, len(st.Members), gt.NumField()))
	}
	for i := range min(len(st.Members), gt.NumField()) {
		m, f := st.Members[i], gt.Field(i)
		name := strings.ToLower(f.Name)
		if tag := f.Tag.Get("btf"); tag != "" {
			name = tag
		}
		if m.Name != name {
			errs = append(errs, fmt.Errorf("struct %s member %d: %s in C, %s in Go", st.Name, i, m.Name, f.Name))
		}
		if uintptr(m.Offset.Bytes()) != f.Offset {
			errs = append(errs, fmt.Errorf("struct %s.%s: offset %d in C, %d in Go", st.Name, m.Name, m.Offset.Bytes(), f.Offset))
		}
		if size, err := btf.Sizeof(m.Type); err != nil || uintptr(size) != f.Type.Size() {
			errs = append(errs, fmt.Errorf("struct %s.%s: %d bytes in C, %d in Go", st.Name, m.Name, size, f.Type.Size()))
		}
	}
	return errors.Join(errs...)
}

// Member finds the member at path ("body.ref.idx", names joined by dots)
// in the struct typ: its offset in bytes from typ's start, and its type.
func Member(typ btf.Type, path string) (offset uint32, member btf.Type, err error) {
	member = typ
	for _, name := range strings.Split(path, ".") {
		st, ok := btf.UnderlyingType(member).(*btf.Struct)
		if !ok {
			return 0, nil, fmt.Errorf("%s: %v is not a struct", path, member)
		}
		found := false
		for _, m := range st.Members {
			if m.Name == name {
				offset += m.Offset.Bytes()
				member, found = m.Type, true
				break
			}
		}
		if !found {
			return 0, nil, fmt.Errorf("%s: struct %s has no member %s", path, st.Name, name)
		}
	}
	return offset, member, nil
}
