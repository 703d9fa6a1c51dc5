package cbuf

import (
	"errors"
	"unsafe"
)

// Aggregate cbufs: a cbuf holding (id, offset, length) entries, shared like
// any other, so a header can be prepended or a payload appended without
// copying either. Same layout as lib/cbuf/src/agg.c.

var ErrAgg = errors.New("cbuf: not an aggregate, or it is full")

const aggHdrSize = int(unsafe.Sizeof(aggHdr{}))
const aggEntSize = int(unsafe.Sizeof(AggEnt{}))

// AggAlloc allocates an aggregate with room for at least n entries.
func (c *Client) AggAlloc(n int) (ID, error) {
	b, id, err := c.Alloc(aggHdrSize + n*aggEntSize)
	if err != nil {
		return 0, err
	}
	h := (*aggHdr)(unsafe.Pointer(&b[0]))
	*h = aggHdr{Magic: AggMagic, Cap: uint32((len(b) - aggHdrSize) / aggEntSize)}
	return id, nil
}

func (c *Client) agg(id ID) (*aggHdr, []AggEnt) {
	b := c.peek(id)
	if len(b) < aggHdrSize {
		return nil, nil
	}
	h := (*aggHdr)(unsafe.Pointer(&b[0]))
	if h.Magic != AggMagic || h.N > h.Cap || aggHdrSize+int(h.Cap)*aggEntSize > len(b) {
		return nil, nil
	}
	return h, unsafe.Slice((*AggEnt)(unsafe.Pointer(&b[aggHdrSize])), h.Cap)
}

// AggAppend adds (part, off, len) at the end of an aggregate this
// component owns.
func (c *Client) AggAppend(agg, part ID, off, n uint32) error {
	h, e := c.agg(agg)
	if h == nil || h.N >= h.Cap || uint64(off)+uint64(n) > uint64(c.Size(part)) {
		return ErrAgg
	}
	e[h.N] = AggEnt{ID: uint64(part), Off: off, Len: n}
	h.N++
	return nil
}

// AggPrepend adds (part, off, len) at the front (a header, say).
func (c *Client) AggPrepend(agg, part ID, off, n uint32) error {
	h, e := c.agg(agg)
	if h == nil || h.N >= h.Cap || uint64(off)+uint64(n) > uint64(c.Size(part)) {
		return ErrAgg
	}
	copy(e[1:h.N+1], e[:h.N])
	e[0] = AggEnt{ID: uint64(part), Off: off, Len: n}
	h.N++
	return nil
}

// AggEntries lists an aggregate the caller holds.
func (c *Client) AggEntries(agg ID) ([]AggEnt, error) {
	h, e := c.agg(agg)
	if h == nil {
		return nil, ErrAgg
	}
	return append([]AggEnt(nil), e[:h.N]...), nil
}
