package capture

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// TLS libraries inside other files: OpenSSL or BoringSSL linked into an
// executable (Node.js carries OpenSSL 3 in its 100 MB binary) or into a
// shared object other than libssl. Found by their SSL_read/SSL_write in the
// dynamic symbol table, else the static one; attached like libssl, with the
// library named in the probes' attach cookie (CAP_LIB_*), so the record says
// which (Query.Library).

// Library names of Query.Library.
const (
	LibOpenSSL       = "openssl"        // libssl.so
	LibOpenSSLStatic = "openssl-static" // OpenSSL inside another file
	LibBoringSSL     = "boringssl"
	LibGo            = "go"
	LibNone          = "none"
)

// sslObj is what a file's TLS library offers the probes.
type sslObj struct {
	syms sslSyms
	kind string // LibOpenSSL, LibOpenSSLStatic or LibBoringSSL
}

// cookie is the CAP_LIB_* value the probes on this file carry.
func (o *sslObj) cookie() uint64 {
	switch o.kind {
	case LibOpenSSLStatic:
		return libSSLStatic
	case LibBoringSSL:
		return libBoring
	}
	return libSSL
}

// boringMarks are functions BoringSSL has and OpenSSL never had.
var boringMarks = []string{"CRYPTO_BUFFER_new", "SSL_CTX_set_select_certificate_cb"}

var errNoSSL = errors.New("no SSL_write/SSL_read")

// findSSLObj reads the file offsets of sslNames from f (named name), from
// the dynamic symbols or, when they lack SSL_read/SSL_write, the static
// ones. errNoSSL: the file carries no TLS library we probe.
func findSSLObj(f *elf.File, name string) (*sslObj, error) {
	want := map[string]bool{}
	for _, n := range sslNames {
		want[n] = true
	}
	for _, n := range boringMarks {
		want[n] = true
	}
	for _, t := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		var found map[string]uint64
		err := errNoGNUHash
		if t == elf.SHT_DYNSYM {
			found, err = gnuHashLookup(f, want)
		}
		if err != nil {
			found, err = scanSymbols(f, t, want)
		}
		if err != nil {
			return nil, err
		}
		if found["SSL_write"] == 0 || found["SSL_read"] == 0 {
			continue
		}
		o := &sslObj{syms: sslSyms{}, kind: LibOpenSSLStatic}
		if strings.HasPrefix(filepath.Base(name), "libssl.so") {
			o.kind = LibOpenSSL
		}
		for _, m := range boringMarks {
			if found[m] != 0 {
				o.kind = LibBoringSSL
			}
		}
		for _, n := range sslNames {
			if v := found[n]; v != 0 {
				off, err := fileOffset(f, v)
				if err != nil {
					return nil, err
				}
				o.syms[n] = off
			}
		}
		return o, nil
	}
	return nil, errNoSSL
}

// scanSymbols returns the addresses of the defined functions named in want
// from f's symbol table of type t (none: an empty map). It reads the table
// in place: debug/elf's Symbols would make a string of each of a large
// binary's hundreds of thousands of names.
func scanSymbols(f *elf.File, t elf.SectionType, want map[string]bool) (map[string]uint64, error) {
	out := map[string]uint64{}
	var sec *elf.Section
	for _, s := range f.Sections {
		if s.Type == t {
			sec = s
			break
		}
	}
	if sec == nil || f.Class != elf.ELFCLASS64 || int(sec.Link) >= len(f.Sections) {
		return out, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", sec.Name, err)
	}
	strs, err := f.Sections[sec.Link].Data()
	if err != nil {
		return nil, fmt.Errorf("read %s's names: %w", sec.Name, err)
	}
	bo := f.ByteOrder
	for i := elf.Sym64Size; i+elf.Sym64Size <= len(data); i += elf.Sym64Size { // entry 0 is the null symbol
		e := data[i : i+elf.Sym64Size]
		info, shndx := e[4], elf.SectionIndex(bo.Uint16(e[6:8]))
		value := bo.Uint64(e[8:16])
		if elf.ST_TYPE(info) != elf.STT_FUNC || shndx == elf.SHN_UNDEF || value == 0 {
			continue
		}
		n := int(bo.Uint32(e[0:4]))
		if n >= len(strs) {
			continue
		}
		end := n
		for end < len(strs) && strs[end] != 0 {
			end++
		}
		if want[string(strs[n:end])] { // no allocation: the compiler looks up in place
			out[string(strs[n:end])] = value
		}
	}
	return out, nil
}

var errNoGNUHash = errors.New("no .gnu.hash")

// gnuHashLookup finds the defined functions named in want among f's
// dynamic symbols through the GNU hash table: a few small reads, where
// reading node's tables whole is 7 MB (about 100 ms on a loaded machine,
// on the way from its exec to its first TLS call). errNoGNUHash: the file
// has none (scanSymbols then).
func gnuHashLookup(f *elf.File, want map[string]bool) (map[string]uint64, error) {
	hs, dyn := f.Section(".gnu.hash"), f.Section(".dynsym")
	if hs == nil || dyn == nil || f.Class != elf.ELFCLASS64 || int(dyn.Link) >= len(f.Sections) {
		return nil, errNoGNUHash
	}
	strs := f.Sections[dyn.Link]
	bo := f.ByteOrder
	var hdr [16]byte
	if _, err := hs.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf(".gnu.hash: %w", err)
	}
	nb, symoff := bo.Uint32(hdr[0:4]), bo.Uint32(hdr[4:8])
	bloom := uint64(bo.Uint32(hdr[8:12]))
	if nb == 0 {
		return nil, errNoGNUHash
	}
	buckets := 16 + 8*bloom
	chains := buckets + 4*uint64(nb)
	u32 := func(off uint64) (uint32, error) {
		var b [4]byte
		_, err := hs.ReadAt(b[:], int64(off))
		return bo.Uint32(b[:]), err
	}
	out := map[string]uint64{}
	var sym [elf.Sym64Size]byte
	for name := range want {
		h := uint32(5381)
		for i := 0; i < len(name); i++ {
			h = h*33 + uint32(name[i])
		}
		idx, err := u32(buckets + 4*uint64(h%nb))
		if err != nil {
			return nil, fmt.Errorf(".gnu.hash: %w", err)
		}
		for idx >= symoff {
			h2, err := u32(chains + 4*uint64(idx-symoff))
			if err != nil {
				return nil, fmt.Errorf(".gnu.hash: %w", err)
			}
			if h|1 == h2|1 {
				if _, err := dyn.ReadAt(sym[:], int64(idx)*elf.Sym64Size); err != nil {
					return nil, fmt.Errorf(".dynsym: %w", err)
				}
				nm := make([]byte, len(name)+1)
				if _, err := strs.ReadAt(nm, int64(bo.Uint32(sym[0:4]))); err == nil && string(nm[:len(name)]) == name && nm[len(name)] == 0 {
					value := bo.Uint64(sym[8:16])
					if elf.ST_TYPE(sym[4]) == elf.STT_FUNC && elf.SectionIndex(bo.Uint16(sym[6:8])) != elf.SHN_UNDEF && value != 0 {
						out[name] = value
					}
					break
				}
			}
			if h2&1 != 0 {
				break
			}
			idx++
		}
	}
	return out, nil
}
