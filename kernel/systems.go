package kernel

import (
	"errors"
	"fmt"
	"strings"
)

// SystemStatus says whether a system runs on this kernel.
type SystemStatus string

const (
	SystemOK          SystemStatus = "ok"
	SystemDegraded    SystemStatus = "degraded"    // runs, with a variant: Detail says which
	SystemUnavailable SystemStatus = "unavailable" // a feature it needs is missing: Detail says which
)

// System is one Cistern system and how it fares on this kernel.
type System struct {
	Name   string       `json:"name"`
	Status SystemStatus `json:"status"`
	Detail string       `json:"detail"`
}

// fallback is what a system does without an optional feature.
type fallback struct {
	feature string
	instead string // "cls_bpf instead of TCX"
}

// requirement is what one system needs of the kernel.
type requirement struct {
	name      string
	needs     []string   // features it cannot run without
	fallbacks []fallback // features it can do without, and how
	path      string     // how it runs where it runs, when that needs saying
}

// requirements is the per-system table: which features each system's
// programs use (see bpf/<system>/ and bpf/include/cistern/). SYSCALL
// programs are not listed: user-invoked programs run as XDP through
// BPF_PROG_TEST_RUN.
var requirements = []requirement{
	{name: "pool", needs: []string{"btf", "xdp", "mmap_array", "atomics"}},
	{name: "kv", needs: []string{"btf", "xdp", "mmap_array", "atomics", "bpf_loop", "xdp_load_bytes"},
		fallbacks: []fallback{{"tcx", "cls_bpf instead of TCX"}, {"xdp_live_frames", "bench kv measures with the user-space load generator only"},
			{"sockmap_verdict", "TCP GETs all go to memcached (UDP GETs only are answered in the kernel)"},
			{"sockmap_self_redirect", "TCP GETs answered in the kernel only with kv serve --tcp (this kernel's sockmap can leave an answered segment counted as unread)"}}},
	{name: "accum/capture", needs: []string{"btf", "tracepoint", "tp_btf", "uprobe", "ringbuf", "atomics", "for_each_map_elem", "bpf_timer", "bpf_loop"}},
	{name: "evict/cache", needs: []string{"btf", "xdp", "bpf_loop"}},
	{name: "pagecache", needs: []string{"btf", "tp_btf", "raw_tp", "tracepoint", "ringbuf", "bpf_loop", "atomics", "bpf_timer", "mmap_array"},
		fallbacks: []fallback{
			{"filemap_get_pages", "read/pread64 calls as the read signal instead of mm_filemap_get_pages"},
			{"cachestat", "mincore instead of cachestat"},
		},
		// Every kernel with these features runs it (6.1 up): the
		// ring-buffer round trip per event is gone.
		path: "the policy in the kernel's path (tracepoint programs apply each event under a lock no CPU waits for; the agent only drops pages)"},
	{name: "cbuf", needs: []string{"btf", "tracepoint", "ringbuf", "mmap_array"}},
	{name: "query", needs: []string{"btf", "tracepoint", "raw_tp", "uprobe", "ringbuf"}},
}

// Systems says, from this package's probes, how each system fares on the
// running kernel.
func Systems() []System { return SystemsFor(Has) }

// SystemsFor computes the table from has, which answers nil for a feature
// the kernel has (Has, or a fake in tests).
func SystemsFor(has func(feature string) error) []System {
	since := map[string]string{}
	for _, f := range Features() {
		since[f.Name] = f.Since
	}
	var out []System
	for _, r := range requirements {
		s := System{Name: r.name, Status: SystemOK}
		var lacking, instead []string
		for _, f := range r.needs {
			if err := has(f); err != nil {
				lacking = append(lacking, describe(f, since[f], err))
			}
		}
		for _, fb := range r.fallbacks {
			if has(fb.feature) != nil {
				instead = append(instead, fb.instead)
			}
		}
		switch {
		case len(lacking) > 0:
			s.Status = SystemUnavailable
			s.Detail = "needs " + strings.Join(lacking, ", ")
		case len(instead) > 0:
			s.Status = SystemDegraded
			s.Detail = strings.Join(instead, "; ")
		default:
			s.Detail = "every feature it uses is here"
		}
		if r.path != "" && s.Status != SystemUnavailable {
			s.Detail += "; " + r.path
		}
		out = append(out, s)
	}
	return out
}

func describe(feature, since string, err error) string {
	switch {
	case since != "" && errors.Is(err, ErrMissing):
		return fmt.Sprintf("%s (Linux %s)", feature, since)
	case errors.Is(err, ErrMissing):
		return feature
	default:
		return fmt.Sprintf("%s (%v)", feature, err)
	}
}

// Effect says in one sentence what a kernel without feature costs Cistern:
// the systems that cannot run, and what the others do instead ("" when no
// system uses it).
func Effect(feature string) string {
	var need, instead []string
	for _, r := range requirements {
		for _, f := range r.needs {
			if f == feature {
				need = append(need, r.name)
			}
		}
		for _, fb := range r.fallbacks {
			if fb.feature == feature {
				instead = append(instead, r.name+": "+fb.instead)
			}
		}
	}
	var parts []string
	if len(need) > 0 {
		parts = append(parts, "without it "+strings.Join(need, ", ")+" cannot run")
	}
	parts = append(parts, instead...)
	return strings.Join(parts, "; ")
}
