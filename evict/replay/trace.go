// Package replay replays cache traces through the in-kernel eviction
// policies of package evict (any name of its registry), and parses the trace
// formats of
// /work/shared/data/traces (Twitter, CloudPhysics, ARC, plain CSV),
// zstd-compressed or not.
package replay

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"

	"github.com/klauspost/compress/zstd"

	"github.com/cistern-ebpf/cistern/evict"
)

// BlockSize is the unit block traces are expanded into: a request for n bytes
// (CloudPhysics) or n blocks (ARC) becomes one request per 512-byte block.
const BlockSize = 512

// Formats lists the trace formats Parse reads.
var Formats = []string{"twitter", "cloudphysics", "arc", "csv"}

// ValidFormat reports whether f is one of Formats.
func ValidFormat(f string) bool {
	for _, g := range Formats {
		if f == g {
			return true
		}
	}
	return false
}

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// ReadFile parses the trace in path (zstd-compressed or plain text) and
// returns its requests in order.
func ReadFile(path, format string) ([]evict.Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []evict.Request
	err = Parse(f, format, func(r evict.Request) error {
		reqs = append(reqs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reqs, nil
}

// Parse reads a trace of format from r, decompressing it if it starts with
// the zstd magic, and calls emit for each request:
//
//	twitter       "time, object, size, next_access_vtime": key object, size size
//	cloudphysics  "version,time,op,size,lbn": ceil(size/512) blocks from lbn
//	arc           "start_block num_blocks ignored request_no": num_blocks blocks
//	csv           "key,size": a decimal key, or any other text (hashed, FNV-1a)
//
// Block requests have the block number as key and size 512. Empty lines,
// lines starting with '#' and a first line that is a header are skipped.
func Parse(r io.Reader, format string, emit func(evict.Request) error) error {
	if !ValidFormat(format) {
		return fmt.Errorf("unknown trace format %q (have %v)", format, Formats)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	if head, _ := br.Peek(4); bytes.Equal(head, zstdMagic) {
		dec, err := zstd.NewReader(br)
		if err != nil {
			return err
		}
		defer dec.Close()
		br = bufio.NewReaderSize(dec, 1<<20)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var fields [][]byte
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		if format == "arc" {
			fields = splitSpace(b, fields[:0])
		} else {
			fields = splitComma(b, fields[:0])
		}
		err := parseLine(format, fields, emit)
		if err == errHeader && line == 1 {
			continue
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	return sc.Err()
}

var errHeader = fmt.Errorf("not a %s record", "trace")

func parseLine(format string, f [][]byte, emit func(evict.Request) error) error {
	num := func(i int) (uint64, error) {
		if i >= len(f) {
			return 0, fmt.Errorf("%d fields, want at least %d", len(f), i+1)
		}
		v, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return 0, errHeader
		}
		return v, nil
	}
	blocks := func(start, n uint64) error {
		for i := range n {
			if err := emit(evict.Request{Key: start + i, Size: BlockSize}); err != nil {
				return err
			}
		}
		return nil
	}
	switch format {
	case "twitter":
		key, err := num(1)
		if err != nil {
			return err
		}
		size, err := num(2)
		if err != nil {
			return err
		}
		return emit(evict.Request{Key: key, Size: uint32(min(size, 1<<32-1))})
	case "cloudphysics":
		size, err := num(3)
		if err != nil {
			return err
		}
		lbn, err := num(4)
		if err != nil {
			return err
		}
		return blocks(lbn, max(1, (size+BlockSize-1)/BlockSize))
	case "arc":
		start, err := num(0)
		if err != nil {
			return err
		}
		n, err := num(1)
		if err != nil {
			return err
		}
		return blocks(start, n)
	default: // csv
		if len(f) < 2 {
			return fmt.Errorf("%d fields, want key,size", len(f))
		}
		size, err := num(1)
		if err != nil {
			return err
		}
		key, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			h := fnv.New64a()
			h.Write(f[0])
			key = h.Sum64()
		}
		return emit(evict.Request{Key: key, Size: uint32(min(size, 1<<32-1))})
	}
}

func splitComma(b []byte, out [][]byte) [][]byte {
	for {
		i := bytes.IndexByte(b, ',')
		if i < 0 {
			return append(out, bytes.TrimSpace(b))
		}
		out = append(out, bytes.TrimSpace(b[:i]))
		b = b[i+1:]
	}
}

func splitSpace(b []byte, out [][]byte) [][]byte {
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != ' ' && b[i] != '\t' {
			i++
		}
		if i > 0 {
			out = append(out, b[:i])
		}
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		b = b[i:]
	}
	return out
}
