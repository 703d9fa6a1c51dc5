package pool

import (
	"encoding/binary"
	"fmt"
)

// RefHeaderSize is the fixed part of struct pool_ref: ver, len, nblocks.
const RefHeaderSize = 8 + 4 + 4

// Ref mirrors struct pool_ref (cistern/pool.h): one version of an object's
// content, the blocks that hold it in order.
type Ref struct {
	Ver     uint64   `json:"ver"`     // unique per version; 0: no content
	Len     uint32   `json:"len"`     // payload bytes
	NBlocks uint32   `json:"nblocks"` // used entries of Idx
	Idx     []uint64 `json:"idx"`     // block indices (keys of pool_blocks)
}

// RefSize is sizeof(struct pool_ref) for a compile-time CISTERN_POOL_MAX_BLOCKS
// of maxBlocks.
func RefSize(maxBlocks int) int { return RefHeaderSize + 8*maxBlocks }

// ParseRef reads a struct pool_ref compiled with CISTERN_POOL_MAX_BLOCKS =
// maxBlocks from the start of b (raw map-value bytes, BPF little endian).
func ParseRef(b []byte, maxBlocks int) (Ref, error) {
	if len(b) < RefSize(maxBlocks) {
		return Ref{}, fmt.Errorf("pool_ref: %d bytes, want %d", len(b), RefSize(maxBlocks))
	}
	le := binary.LittleEndian
	r := Ref{Ver: le.Uint64(b[0:]), Len: le.Uint32(b[8:]), NBlocks: le.Uint32(b[12:])}
	if int(r.NBlocks) > maxBlocks {
		return Ref{}, fmt.Errorf("pool_ref: %d blocks, compile-time cap %d", r.NBlocks, maxBlocks)
	}
	r.Idx = make([]uint64, r.NBlocks)
	for i := range r.Idx {
		r.Idx[i] = le.Uint64(b[RefHeaderSize+8*i:])
	}
	return r, nil
}
