package loadgen

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	// KeyLen is the length of every key.
	KeyLen = 8
	// MaxKeys is the number of distinct 8-digit hex keys.
	MaxKeys = 1 << 32
	// HeaderLen is the length of a value's header: the key number and the
	// version, 8 hex digits each.
	HeaderLen = 16
	// MinValueSize is the smallest value: a header and no filler.
	MinValueSize = HeaderLen
	// MaxValueSize keeps a SET request within one UDP datagram. memcached
	// splits replies above about 1400 bytes over several datagrams, which
	// the load generator counts as errors, so sizes above that are only
	// useful against servers that do not split.
	MaxValueSize = 65000
)

// Errors CheckValue returns; they are sentinels so that checking a value
// never allocates.
var (
	ErrValueLength  = errors.New("loadgen: value has the wrong length")
	ErrValueKey     = errors.New("loadgen: value belongs to another key")
	ErrValueCorrupt = errors.New("loadgen: value is corrupt or torn between versions")
)

const hexDigits = "0123456789abcdef"

// AppendKey appends key number k (0 <= k < MaxKeys) as KeyLen lower-case hex
// digits.
func AppendKey(dst []byte, k int) []byte {
	return appendHex32(dst, uint32(k))
}

// Key returns key number k as a string (see AppendKey).
func Key(k int) string { return string(AppendKey(make([]byte, 0, KeyLen), k)) }

// KeyFlags is the memcached flags word stored with key number k. It varies
// with the key so that a server returning another key's flags is caught.
func KeyFlags(k int) uint32 { return uint32(k) & 0xffff }

func appendHex32(dst []byte, v uint32) []byte {
	for shift := 28; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(v>>uint(shift))&0xf])
	}
	return dst
}

// parseHex32 decodes 8 hex digits; ok is false on any other byte.
func parseHex32(b []byte) (v uint32, ok bool) {
	for _, c := range b[:8] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(d)
	}
	return v, true
}

// mix64 is the splitmix64 finalizer: a cheap, well-mixing bijection.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

const golden = 0x9e3779b97f4a7c15

// fillerWord is the j-th 8-byte word of the filler of (key, version). Every
// byte is in '0'..'o' so values stay printable and never contain "\r\n".
func fillerWord(seed uint64, j int) uint64 {
	return mix64(seed+uint64(j+1)*golden)&0x3f3f3f3f3f3f3f3f + 0x3030303030303030
}

func fillerSeed(key int, version uint32) uint64 {
	return mix64(uint64(uint32(key))<<32 | uint64(version) ^ 0x6c6f616467656e21)
}

// AppendValue appends the value of key number key at version, size bytes
// long (MinValueSize <= size <= MaxValueSize): the header
// "<key hex8><version hex8>" followed by filler derived from (key, version),
// so that a value can be checked without remembering it.
func AppendValue(dst []byte, key int, version uint32, size int) []byte {
	if size < MinValueSize {
		panic(fmt.Sprintf("loadgen: value size %d below %d", size, MinValueSize))
	}
	dst = appendHex32(dst, uint32(key))
	dst = appendHex32(dst, version)
	seed := fillerSeed(key, version)
	var w [8]byte
	n := size - HeaderLen
	for j := 0; n > 0; j++ {
		binary.LittleEndian.PutUint64(w[:], fillerWord(seed, j))
		c := min(n, 8)
		dst = append(dst, w[:c]...)
		n -= c
	}
	return dst
}

// CheckValue verifies that v is a whole, uncorrupted value of key number
// key, size bytes long, and returns its version. It does not allocate.
func CheckValue(v []byte, key, size int) (version uint32, err error) {
	if len(v) != size || size < MinValueSize {
		return 0, ErrValueLength
	}
	k, ok1 := parseHex32(v[0:8])
	version, ok2 := parseHex32(v[8:16])
	if !ok1 || !ok2 {
		return 0, ErrValueCorrupt
	}
	if k != uint32(key) {
		return version, ErrValueKey
	}
	seed := fillerSeed(key, version)
	f := v[HeaderLen:]
	j := 0
	for ; len(f) >= 8; j++ {
		if binary.LittleEndian.Uint64(f) != fillerWord(seed, j) {
			return version, ErrValueCorrupt
		}
		f = f[8:]
	}
	if len(f) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], fillerWord(seed, j))
		if string(f) != string(w[:len(f)]) {
			return version, ErrValueCorrupt
		}
	}
	return version, nil
}

// SizeWeight is one value size and its relative weight.
type SizeWeight struct {
	Size   int
	Weight float64
}

// WeightedValueSize returns a ValueSize function that gives each key one of
// the sizes, chosen by a hash of the key number, so that the share of keys
// of each size follows the weights and a key's size never changes.
func WeightedValueSize(ws ...SizeWeight) func(key int) int {
	var total float64
	for _, w := range ws {
		if w.Weight < 0 {
			panic("loadgen: negative size weight")
		}
		total += w.Weight
	}
	if len(ws) == 0 || total <= 0 {
		panic("loadgen: WeightedValueSize needs a positive weight")
	}
	cum := make([]float64, len(ws))
	var acc float64
	for i, w := range ws {
		acc += w.Weight / total
		cum[i] = acc
	}
	sizes := make([]int, len(ws))
	for i, w := range ws {
		sizes[i] = w.Size
	}
	return func(key int) int {
		u := float64(mix64(uint64(key)^0x73697a6573)>>11) * 0x1p-53
		for i, c := range cum {
			if u < c {
				return sizes[i]
			}
		}
		return sizes[len(sizes)-1]
	}
}

// DefaultValueSize is the Kerby paper's mix: 75% of the keys get 128-byte
// values and 25% get 1024-byte values.
var DefaultValueSize = WeightedValueSize(SizeWeight{128, 3}, SizeWeight{1024, 1})
