// Package doctor checks, by trying them, the kernel features and external
// tools that Cistern relies on, and says how to fix what is missing.
package doctor

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/cistern-ebpf/cistern/kernel"
)

// Status of one check.
type Status string

const (
	OK          Status = "ok"
	Missing     Status = "missing"     // can be installed or enabled: Fix says how
	Unsupported Status = "unsupported" // the kernel refuses: Detail says what Cistern does instead
)

// Check is the outcome of one capability probe.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// Core checks must be ok for Cistern to run at all.
	Core bool `json:"core"`
}

// Report is what `cistern doctor --json` prints: one check per capability
// and tool, then how each system fares on this kernel (from package
// kernel's probes).
type Report struct {
	Kernel  string          `json:"kernel"`
	Agent   bool            `json:"agent,omitempty"` // run as a node agent (AgentMode): no tool checks
	Checks  []Check         `json:"checks"`
	Systems []kernel.System `json:"systems"`
}

// Unavailable lists the systems that cannot run on this kernel.
func (r *Report) Unavailable() []string {
	var out []string
	for _, s := range r.Systems {
		if s.Status == kernel.SystemUnavailable {
			out = append(out, s.Name)
		}
	}
	return out
}

// CoreOK tells whether every core check passed.
func (r *Report) CoreOK() bool {
	for _, c := range r.Checks {
		if c.Core && c.Status != OK {
			return false
		}
	}
	return true
}

// Find returns the named check, or nil.
func (r *Report) Find(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "kernel %s\n\n", r.Kernel)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		name := c.Name
		if c.Core {
			name += " *"
		}
		detail := c.Detail
		if c.Fix != "" {
			detail += " — fix: " + c.Fix
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, c.Status, detail)
	}
	if r.Agent {
		fmt.Fprintln(tw, "development tools\tnot checked\tagent mode (CISTERN_AGENT=1): a node agent needs none")
	}
	if len(r.Systems) > 0 {
		fmt.Fprintln(tw, "\nSYSTEM\tSTATUS\tDETAIL")
		for _, s := range r.Systems {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Status, s.Detail)
		}
	}
	tw.Flush()
	if r.CoreOK() {
		fmt.Fprintln(w, "\n* core: all ok")
	} else {
		fmt.Fprintln(w, "\n* core: NOT all ok — Cistern cannot run until the core checks pass")
	}
}

// Options tune Run.
type Options struct {
	// SkipTools leaves out the external-tool checks.
	SkipTools bool
	// Progress, when set, is called before each probe group.
	Progress func(step string)
}

// AgentMode tells whether cistern runs as a node agent in a container
// (CISTERN_AGENT=1, set by deploy/kubernetes): there the external tools the
// doctor checks (compilers, servers, benchmark loads) are development
// tools, not missing, so they are not listed.
func AgentMode() bool { return os.Getenv("CISTERN_AGENT") == "1" }

// Run performs every check. It leaves no namespace, link or pin behind.
func Run(ctx context.Context, opt Options) *Report {
	r := &Report{Kernel: kernel.Release()}
	step := func(s string) {
		if opt.Progress != nil {
			opt.Progress(s)
		}
	}
	step("system")
	r.Checks = append(r.Checks, systemChecks()...)
	step("bpf programs")
	r.Checks = append(r.Checks, bpfChecks(ctx)...)
	r.Systems = kernel.Systems()
	r.Agent = AgentMode()
	if !opt.SkipTools && !r.Agent {
		step("tools")
		r.Checks = append(r.Checks, toolChecks()...)
	}
	return r
}

func ok(name, detail string) Check { return Check{Name: name, Status: OK, Detail: detail, Core: true} }

func fail(name string, status Status, err error, fix string) Check {
	// A verifier log is for developers; the first line says enough here.
	return Check{Name: name, Status: status, Detail: firstLine(err), Fix: fix, Core: true}
}
