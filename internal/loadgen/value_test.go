package loadgen_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cistern-ebpf/cistern/internal/loadgen"
)

func TestKey(t *testing.T) {
	for k, want := range map[int]string{0: "00000000", 1: "00000001", 0xabcdef12: "abcdef12", loadgen.MaxKeys - 1: "ffffffff"} {
		if got := loadgen.Key(k); got != want {
			t.Errorf("Key(%d) = %q, want %q", k, got, want)
		}
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, size := range []int{16, 17, 23, 24, 25, 128, 1000, 1024, 1031} {
		for _, key := range []int{0, 1, 99999, 1<<32 - 1} {
			for _, ver := range []uint32{0, 1, 2, 0xdeadbeef} {
				v := loadgen.AppendValue(nil, key, ver, size)
				if len(v) != size {
					t.Fatalf("key %d version %d: len %d, want %d", key, ver, len(v), size)
				}
				for _, c := range v {
					if c < 0x21 || c > 0x7e {
						t.Fatalf("key %d version %d: byte %q is not printable", key, ver, c)
					}
				}
				got, err := loadgen.CheckValue(v, key, size)
				if err != nil || got != ver {
					t.Fatalf("key %d version %d size %d: CheckValue = %d, %v", key, ver, size, got, err)
				}
			}
		}
	}
	// The same key at another version, and another key at the same
	// version, have other filler.
	a := loadgen.AppendValue(nil, 5, 1, 128)
	if b := loadgen.AppendValue(nil, 5, 2, 128); bytes.Equal(a[16:], b[16:]) {
		t.Error("filler does not depend on the version")
	}
	if b := loadgen.AppendValue(nil, 6, 1, 128); bytes.Equal(a[16:], b[16:]) {
		t.Error("filler does not depend on the key")
	}
}

func TestValueWrongLengthOrKey(t *testing.T) {
	v := loadgen.AppendValue(nil, 42, 7, 128)
	for _, bad := range [][]byte{v[:127], v[:16], v[:3], nil, append(append([]byte{}, v...), 'x')} {
		if _, err := loadgen.CheckValue(bad, 42, 128); !errors.Is(err, loadgen.ErrValueLength) {
			t.Errorf("%d bytes: err %v, want ErrValueLength", len(bad), err)
		}
	}
	if _, err := loadgen.CheckValue(v, 43, 128); !errors.Is(err, loadgen.ErrValueKey) {
		t.Errorf("another key's value: err %v, want ErrValueKey", err)
	}
	// Another key's value with its header rewritten to the right key is
	// still caught by the filler.
	w := loadgen.AppendValue(nil, 43, 7, 128)
	copy(w, v[:16])
	if _, err := loadgen.CheckValue(w, 42, 128); !errors.Is(err, loadgen.ErrValueCorrupt) {
		t.Errorf("relabelled value: err %v, want ErrValueCorrupt", err)
	}
}

func TestValueCorruptByte(t *testing.T) {
	for _, size := range []int{128, 1021} {
		v := loadgen.AppendValue(nil, 9, 3, size)
		for i := range v {
			bad := append([]byte{}, v...)
			bad[i] ^= 0x01
			if _, err := loadgen.CheckValue(bad, 9, size); err == nil {
				t.Fatalf("size %d: flipping byte %d went unnoticed", size, i)
			}
		}
	}
}

// TestValueTorn builds every value made of a prefix of one version and the
// rest of another: unless it equals one of them, CheckValue must refuse it.
func TestValueTorn(t *testing.T) {
	for _, vs := range [][2]uint32{{1, 2}, {0x12345678, 0x9abcdef0}, {7, 0}} {
		for _, size := range []int{128, 1024, 1027} {
			a := loadgen.AppendValue(nil, 77, vs[0], size)
			b := loadgen.AppendValue(nil, 77, vs[1], size)
			for _, pair := range [][2][]byte{{a, b}, {b, a}} {
				for i := 1; i < size; i++ {
					torn := append(append([]byte{}, pair[0][:i]...), pair[1][i:]...)
					if bytes.Equal(torn, a) || bytes.Equal(torn, b) {
						continue
					}
					if ver, err := loadgen.CheckValue(torn, 77, size); err == nil {
						t.Fatalf("versions %x/%x size %d torn at %d accepted as version %x", vs[0], vs[1], size, i, ver)
					}
				}
			}
		}
	}
}

func TestDefaultValueSize(t *testing.T) {
	const n = 100000
	big := 0
	for k := range n {
		switch s := loadgen.DefaultValueSize(k); s {
		case 1024:
			big++
		case 128:
		default:
			t.Fatalf("key %d: size %d", k, s)
		}
		if loadgen.DefaultValueSize(k) != loadgen.DefaultValueSize(k) {
			t.Fatalf("key %d: size not deterministic", k)
		}
	}
	if frac := float64(big) / n; frac < 0.24 || frac > 0.26 {
		t.Errorf("%.3f of the keys have 1024-byte values, want 0.25", frac)
	}
	f := loadgen.WeightedValueSize(loadgen.SizeWeight{Size: 100, Weight: 1}, loadgen.SizeWeight{Size: 200, Weight: 0})
	for k := range 1000 {
		if f(k) != 100 {
			t.Fatalf("zero-weight size chosen for key %d", k)
		}
	}
}

func BenchmarkCheckValue1024(b *testing.B) {
	v := loadgen.AppendValue(nil, 1234, 5, 1024)
	b.SetBytes(1024)
	for b.Loop() {
		if _, err := loadgen.CheckValue(v, 1234, 1024); err != nil {
			b.Fatal(err)
		}
	}
}
