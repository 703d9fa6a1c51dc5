package capture

import (
	"debug/buildinfo"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/arch/x86/x86asm"
)

// Go's crypto/tls (bpf/capture/gotls.bpf.h): uprobes at the entry of
// (*Conn).Write, (*Conn).Read and (*Conn).Close, and at every RET
// instruction of Write and Read (found by disassembling them), never
// uretprobes: a uretprobe replaces the return address on the stack, and Go
// moves and copies goroutine stacks (and walks them for tracebacks and the
// garbage collector), which a foreign return address breaks.

// Functions of crypto/tls the uprobes go on.
const (
	goTLSWrite = "crypto/tls.(*Conn).Write"
	goTLSRead  = "crypto/tls.(*Conn).Read"
	goTLSClose = "crypto/tls.(*Conn).Close"
	// Every handshake goes through it (Handshake, HandshakeContext, and
	// the first Read or Write): its socket I/O is inside a TLS call even
	// when a program (pgx) hands the handshake to Handshake() itself.
	goTLSHandshake = "crypto/tls.(*Conn).handshakeContext"
)

// errNotGoTLS: the file is not a Go program that links crypto/tls.
var errNotGoTLS = errors.New("not a Go program with crypto/tls")

// goTLS says where the uprobes go in one Go binary: file offsets of the
// functions' entries, and of their RET instructions relative to the entry.
type goTLS struct {
	version             string
	write, read, close  uint64 // 0: close not found
	handshake           uint64 // 0: not found (optional)
	handshakeRets       []uint64
	writeRets, readRets []uint64
	fromPclntab         bool // symbols from .gopclntab (a stripped binary)
}

type goFunc struct{ entry, end uint64 } // virtual addresses

// findGoTLS reads path (an ELF file) and finds crypto/tls's Write, Read and
// Close in its symbol table or, when it is stripped, in .gopclntab (which
// every Go binary keeps: the runtime needs it).
func findGoTLS(path string) (*goTLS, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, errNotGoTLS
	}
	defer f.Close()
	if f.Section(".gopclntab") == nil && f.Section(".go.buildinfo") == nil {
		return nil, errNotGoTLS
	}
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: Go TLS capture supports x86-64 binaries, this is %v", path, f.Machine)
	}
	g := &goTLS{}
	funcs, err := goSymbols(f)
	if err != nil || funcs[goTLSWrite].entry == 0 {
		if funcs, err = goPclntab(f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		g.fromPclntab = true
	}
	if funcs[goTLSWrite].entry == 0 || funcs[goTLSRead].entry == 0 {
		return nil, errNotGoTLS
	}
	// The register ABI (arguments in RAX, RBX, RCX ...) came with Go 1.17.
	if bi, err := buildinfo.ReadFile(path); err == nil {
		g.version = bi.GoVersion
		if !goABIRegs(bi.GoVersion) {
			return nil, fmt.Errorf("%s: built by %s: Go TLS capture needs go1.17 or later (register ABI)", path, bi.GoVersion)
		}
	}
	text := f.Section(".text")
	if text == nil {
		return nil, fmt.Errorf("%s: no .text section", path)
	}
	for _, fn := range []struct {
		name string
		off  *uint64
		rets *[]uint64
	}{
		{goTLSWrite, &g.write, &g.writeRets},
		{goTLSRead, &g.read, &g.readRets},
		{goTLSClose, &g.close, nil},
		{goTLSHandshake, &g.handshake, &g.handshakeRets},
	} {
		sym, ok := funcs[fn.name]
		if !ok || sym.entry == 0 {
			continue // Close, handshakeContext: optional (connections also end with their process)
		}
		if err := placeProbe(f, text, sym, fn.off, fn.rets); err != nil {
			if fn.name == goTLSHandshake { // optional: without it, as before
				g.handshake, g.handshakeRets = 0, nil
				continue
			}
			return nil, fmt.Errorf("%s: %s: %w", path, fn.name, err)
		}
	}
	return g, nil
}

// placeProbe sets *off to the file offset of sym's body (its entry, past
// the stack check: see prologueEnd) and, if rets is not nil, *rets to the
// offsets of its RET instructions from there.
func placeProbe(f *elf.File, text *elf.Section, sym goFunc, off *uint64, rets *[]uint64) error {
	var err error
	if *off, err = fileOffset(f, sym.entry); err != nil {
		return err
	}
	if sym.end <= sym.entry || sym.entry < text.Addr || sym.end > text.Addr+text.Size {
		return fmt.Errorf("bounds %#x-%#x outside .text", sym.entry, sym.end)
	}
	code := make([]byte, sym.end-sym.entry)
	if _, err := text.ReadAt(code, int64(sym.entry-text.Addr)); err != nil {
		return err
	}
	skip := prologueEnd(code)
	*off += skip
	if rets == nil {
		return nil
	}
	all, err := retOffsets(code)
	if err != nil {
		return err
	}
	*rets = (*rets)[:0]
	for _, r := range all {
		if r >= skip {
			*rets = append(*rets, r-skip)
		}
	}
	if len(*rets) == 0 {
		return errors.New("no RET instruction found")
	}
	return nil
}

// prologueEnd is the offset of a Go function's first instruction after its
// stack check (`CMPQ SP|R12, 16(R14); JBE morestack`), 0 if it has none.
// A probe at the entry fires twice when the stack must grow: morestack
// copies the stack and runs the function again from its entry, so a Write
// was captured twice (seen in a 6.1 guest). Past the check the arguments
// are still in their registers.
func prologueEnd(code []byte) uint64 {
	off := 0
	for i := 0; i < 3 && off < len(code); i++ {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return 0
		}
		off += inst.Len
		if inst.Op == x86asm.CMP {
			m, ok := inst.Args[1].(x86asm.Mem)
			if !ok || m.Base != x86asm.R14 || m.Disp != 16 {
				return 0
			}
			next, err := x86asm.Decode(code[off:], 64)
			if err != nil || next.Op != x86asm.JBE {
				return 0
			}
			rel, ok := next.Args[0].(x86asm.Rel)
			if !ok || rel <= 0 {
				return 0 // morestack's stub comes after the body
			}
			return uint64(off + next.Len)
		}
	}
	return 0
}

func goSymbols(f *elf.File) (map[string]goFunc, error) {
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	out := map[string]goFunc{}
	for _, s := range syms {
		switch s.Name {
		case goTLSWrite, goTLSRead, goTLSClose, goTLSHandshake:
			out[s.Name] = goFunc{s.Value, s.Value + s.Size}
		}
	}
	return out, nil
}

// goPclntab finds the functions in .gopclntab, the runtime's own table of
// function names and bounds, which stripping (-ldflags=-s) leaves.
func goPclntab(f *elf.File) (map[string]goFunc, error) {
	sec, text := f.Section(".gopclntab"), f.Section(".text")
	if sec == nil || text == nil {
		return nil, errors.New("stripped, and no .gopclntab")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf(".gopclntab: %w", err)
	}
	out := map[string]goFunc{}
	for _, name := range []string{goTLSWrite, goTLSRead, goTLSClose, goTLSHandshake} {
		if fn := tab.LookupFunc(name); fn != nil {
			out[name] = goFunc{fn.Entry, fn.End}
		}
	}
	return out, nil
}

// fileOffset converts a virtual address to the file offset a uprobe takes.
func fileOffset(f *elf.File, vaddr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= vaddr && vaddr < p.Vaddr+p.Memsz {
			return vaddr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x in no executable segment", vaddr)
}

// retOffsets disassembles code (one function) and returns the offsets of
// its RET instructions. An instruction it cannot decode stops it: a uprobe
// placed inside an instruction would corrupt the program.
func retOffsets(code []byte) ([]uint64, error) {
	var rets []uint64
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			// Padding after the last instruction (INT3) decodes; anything
			// else is a function we do not understand.
			return nil, fmt.Errorf("cannot decode the instruction at +%#x: %v", off, err)
		}
		if inst.Op == x86asm.RET {
			rets = append(rets, uint64(off))
		}
		off += inst.Len
	}
	return rets, nil
}

// goABIRegs: Go 1.17 and later pass arguments in registers on amd64.
func goABIRegs(v string) bool {
	v = strings.TrimPrefix(v, "go")
	major, rest, _ := strings.Cut(v, ".")
	minorS, _, _ := strings.Cut(rest, ".")
	for i, r := range minorS { // go1.21rc1
		if r < '0' || r > '9' {
			minorS = minorS[:i]
			break
		}
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minorS)
	if err1 != nil || err2 != nil {
		return true // a development build: assume current
	}
	return ma > 1 || mi >= 17
}

// attachGo puts the Go TLS uprobes on the binary at path.
func (c *Capture) attachGo(path string, g *goTLS) error {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return err
	}
	type probe struct {
		addr uint64
		prog string
	}
	probes := []probe{{g.write, "write"}, {g.read, "read"}}
	if g.handshake != 0 {
		probes = append(probes, probe{g.handshake, "handshake"})
		for _, r := range g.handshakeRets {
			probes = append(probes, probe{g.handshake + r, "handshake_ret"})
		}
	}
	if g.close != 0 {
		probes = append(probes, probe{g.close, "close"})
	}
	for _, r := range g.writeRets {
		probes = append(probes, probe{g.write + r, "write_ret"})
	}
	for _, r := range g.readRets {
		probes = append(probes, probe{g.read + r, "read_ret"})
	}
	progs := map[string]*ebpf.Program{"write": c.objs.CapGoWrite, "read": c.objs.CapGoRead, "close": c.objs.CapGoClose,
		"write_ret": c.objs.CapGoWriteRet, "read_ret": c.objs.CapGoReadRet, "handshake": c.objs.CapGoHandshake,
		"handshake_ret": c.objs.CapGoHandshakeRet}
	reqs := make([]uprobeReq, 0, len(probes))
	for _, p := range probes {
		reqs = append(reqs, uprobeReq{name: "Go TLS " + p.prog, prog: progs[p.prog], addr: p.addr})
	}
	links, err := c.attachUprobes(ex, path, reqs, c.uprobeOpts.PID)
	if err != nil {
		return err
	}
	c.links = append(c.links, links...)
	return nil
}

// scanGo attaches the Go TLS uprobes to pid's executable if it is a Go
// program with crypto/tls not attached yet. Each file is looked at once.
func (c *Capture) scanGo(pid int) {
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	id, ok := libFileOf(exe)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	if _, _, err := c.lookGo(exe, id); err != nil {
		c.nLibErrors.Add(1)
		c.lastErr.Store(err.Error())
	}
}
