package capture

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/cistern-ebpf/cistern/kernel"
)

// Uprobes on a file: where the kernel has uprobe_multi links (6.6+), one
// link per program holds every address of that program in the file;
// elsewhere (6.1) one perf-event uprobe per address.
//
// Why: detaching a perf-event uprobe waits for RCU grace periods under the
// kernel's global event_mutex. The attach mode of `bench capture` attaches
// hundreds of new files (16 libssl probes, 7-30 Go probes each): its
// Close took 15 minutes at load 13, and every other uprobe attach on the
// machine (another capture's exec attachment) waited behind it, seconds
// each. A uprobe_multi link is released without event_mutex, after one
// grace period for all its addresses, and links are closed side by side.

// uprobeReq is one probe: prog at addr (a file offset) of the file, a
// return probe when ret.
type uprobeReq struct {
	name string // for errors
	sym  string // the symbol, for a perf-event uprobe's name ("" for Go's)
	prog *ebpf.Program
	addr uint64
	ret  bool
	// cookie: what bpf_get_attach_cookie gives the program (the TLS
	// library's CAP_LIB_*; 0 for Go's).
	cookie uint64
}

// useUprobeMulti tells whether the kernel has uprobe_multi links.
// CISTERN_NO_UPROBE_MULTI=1 takes the perf-event path anyway (6.1's, on a
// newer kernel).
func useUprobeMulti() bool {
	return os.Getenv("CISTERN_NO_UPROBE_MULTI") != "1" && kernel.UprobeMulti() == nil
}

// setUprobeMulti makes spec's uprobe programs uprobe_multi programs when
// the kernel has the links (the attach type is fixed at load).
func setUprobeMulti(spec *ebpf.CollectionSpec, multi bool) {
	if !multi {
		return
	}
	for _, ps := range spec.Programs {
		if ps.Type == ebpf.Kprobe && (strings.HasPrefix(ps.SectionName, "uprobe") || strings.HasPrefix(ps.SectionName, "uretprobe")) {
			ps.AttachType = ebpf.AttachTraceUprobeMulti
		}
	}
}

// attachUprobes attaches reqs to ex (pid 0: every process); on an error
// nothing stays attached.
func (c *Capture) attachUprobes(ex *link.Executable, path string, reqs []uprobeReq, pid int) ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		closeLinks(links)
		return nil, err
	}
	if !c.multi {
		for _, r := range reqs {
			o := &link.UprobeOptions{Address: r.addr, PID: pid, Cookie: r.cookie}
			var l link.Link
			var err error
			if r.ret {
				l, err = ex.Uretprobe(r.sym, r.prog, o)
			} else {
				l, err = ex.Uprobe(r.sym, r.prog, o)
			}
			if err != nil {
				return fail(fmt.Errorf("attach %s at %#x (%s): %w", r.name, r.addr, path, err))
			}
			links = append(links, l)
		}
		return links, nil
	}
	type group struct {
		prog    *ebpf.Program
		ret     bool
		names   []string
		addrs   []uint64
		cookies []uint64
	}
	var groups []*group
	for _, r := range reqs {
		var g *group
		for _, x := range groups {
			if x.prog == r.prog && x.ret == r.ret {
				g = x
			}
		}
		if g == nil {
			g = &group{prog: r.prog, ret: r.ret}
			groups = append(groups, g)
		}
		g.names, g.addrs, g.cookies = append(g.names, r.name), append(g.addrs, r.addr), append(g.cookies, r.cookie)
	}
	if !kernel.MultiUprobePIDFilter() {
		pid = 0 // other threads would be missed: every process traps; cap_selected decides
	}
	for _, g := range groups {
		o := &link.UprobeMultiOptions{Addresses: g.addrs, Cookies: g.cookies, PID: uint32(pid)}
		var l link.Link
		var err error
		if g.ret {
			l, err = ex.UretprobeMulti(nil, g.prog, o)
		} else {
			l, err = ex.UprobeMulti(nil, g.prog, o)
		}
		if err != nil {
			return fail(fmt.Errorf("attach %s at %#x (%s, uprobe_multi): %w", strings.Join(g.names, ","), g.addrs, path, err))
		}
		links = append(links, l)
	}
	return links, nil
}

// closeLinks closes links, up to 16 at a time: a uprobe link's release
// waits for a grace period, and those waits overlap.
func closeLinks(links []link.Link) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, l := range links {
		sem <- struct{}{}
		wg.Add(1)
		go func(l link.Link) {
			defer func() { <-sem; wg.Done() }()
			l.Close()
		}(l)
	}
	wg.Wait()
}
