package loadgen

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// memcached UDP frame header: request id, sequence number, datagram count,
// reserved; all big-endian u16.
const frameLen = 8

func putFrame(b []byte, id uint16) {
	binary.BigEndian.PutUint16(b[0:], id)
	binary.BigEndian.PutUint16(b[2:], 0)
	binary.BigEndian.PutUint16(b[4:], 1)
	binary.BigEndian.PutUint16(b[6:], 0)
}

// appendGet appends "get <key>\r\n".
func appendGet(dst, key []byte) []byte {
	dst = append(dst, "get "...)
	dst = append(dst, key...)
	return append(dst, "\r\n"...)
}

// appendSetHead appends "set <key> <flags> 0 <bytes>\r\n"; the value and its
// "\r\n" follow.
func appendSetHead(dst, key []byte, flags uint32, size int) []byte {
	dst = append(dst, "set "...)
	dst = append(dst, key...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(flags), 10)
	dst = append(dst, " 0 "...)
	dst = strconv.AppendUint(dst, uint64(size), 10)
	return append(dst, "\r\n"...)
}

// maxSetLen bounds a SET request datagram for a value of size bytes.
func maxSetLen(size int) int {
	return frameLen + len("set ") + KeyLen + len(" 65535 0 ") + 5 + 2 + size + 2
}

// reply is what parseGetReply made of a GET reply.
type reply uint8

const (
	replyBad      reply = iota // not a well-formed GET reply
	replyMiss                  // END
	replyHit                   // VALUE for the requested key
	replyOtherKey              // well formed, but VALUE for another key
)

var (
	endLine   = []byte("END\r\n")
	valueHead = []byte("VALUE ")
	valueTail = []byte("\r\nEND\r\n")
	storedMsg = []byte("STORED\r\n")
)

// parseGetReply parses "VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n" or
// "END\r\n", the whole of body; data aliases body.
func parseGetReply(body, key []byte) (r reply, flags uint32, data []byte) {
	if bytes.Equal(body, endLine) {
		return replyMiss, 0, nil
	}
	if !bytes.HasPrefix(body, valueHead) {
		return replyBad, 0, nil
	}
	p := body[len(valueHead):]
	sp := bytes.IndexByte(p, ' ')
	if sp <= 0 {
		return replyBad, 0, nil
	}
	gotKey := p[:sp]
	p = p[sp+1:]
	f, p, ok := parseUint(p, ' ')
	if !ok || f > 0xffffffff {
		return replyBad, 0, nil
	}
	n, p, ok := parseUint(p, '\r')
	if !ok || len(p) < 1 || p[0] != '\n' {
		return replyBad, 0, nil
	}
	p = p[1:]
	if uint64(len(p)) != n+uint64(len(valueTail)) || !bytes.Equal(p[n:], valueTail) {
		return replyBad, 0, nil
	}
	if !bytes.Equal(gotKey, key) {
		return replyOtherKey, uint32(f), p[:n]
	}
	return replyHit, uint32(f), p[:n]
}

// parseUint parses decimal digits up to the terminator byte and returns
// what follows the terminator.
func parseUint(p []byte, term byte) (v uint64, rest []byte, ok bool) {
	i := 0
	for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
		if i >= 19 {
			return 0, nil, false
		}
		v = v*10 + uint64(p[i]-'0')
	}
	if i == 0 || i >= len(p) || p[i] != term {
		return 0, nil, false
	}
	return v, p[i+1:], true
}
