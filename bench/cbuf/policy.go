package cbufbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/cbuf"
	"github.com/cistern-ebpf/cistern/internal/benchkit"
	"github.com/cistern-ebpf/cistern/internal/plot"
)

// pshm mirrors struct pshm in bench/cbuf/peer/cbufbench.c.
type pshm struct {
	Stop, Produced, Consumed, Demand, IOps uint64
	Head, Tail                             uint64
	IDs                                    [4096]uint64
}

// Policy experiment: a producer sends 4-page messages to a consumer that
// holds each for policyHoldUs, so the producer needs about rate x hold
// buffers in flight; an interferer's demand for 1-page buffers rises to
// policyPeak pages and falls back while every pool shares policyMemory.
const (
	policyMemory  = 1600 // pages for all pools
	policyPeak    = 1300 // interferer's peak demand, pages
	policyHoldUs  = 2000
	policyWorkNs  = 20000
	policyQosPct  = 10.0
	policySettleS = 1.0 // seconds after the interference starts before qos is judged
)

type policyPhase struct{ quiet, ramp, plateau, fall float64 }

func (p policyPhase) total() float64 { return p.quiet + p.ramp + p.plateau + p.fall }

// demand is the interferer's page demand at time t.
func (p policyPhase) demand(t float64) uint64 {
	switch {
	case t < p.quiet:
		return 5
	case t < p.quiet+p.ramp:
		return 5 + uint64((t-p.quiet)/p.ramp*(policyPeak-5))
	case t < p.quiet+p.ramp+p.plateau:
		return policyPeak
	}
	return 100
}

func cbufPolicies(ctx context.Context, rep *benchkit.Report, opt Options, tmp, peer string) ([]plot.Series, error) {
	ph := policyPhase{4, 6, 8, 6}
	if opt.Quick {
		ph = policyPhase{2, 2, 3, 2}
	}
	rep.SetConfig("policy_memory_pages", policyMemory)
	rep.SetConfig("policy_interferer_peak_pages", policyPeak)
	rep.SetConfig("policy_consumer_hold_us", policyHoldUs)
	rep.SetConfig("policy_qos_target_pct", policyQosPct)
	// Rounds like every other part: one run of each policy was a coin
	// flip for the qos target (its producer blocked 10.1%, 11.6% and 14.7%
	// in three quick runs).
	rounds := benchkit.Rounds(opt.Quick)
	rep.SetConfig("policy_rounds", rounds)
	last := map[string]plot.Series{} // the plot shows the last round
	err := benchkit.Interleave(ctx, rounds, policies, opt.Progress, func(ctx context.Context, _ int, pol string) error {
		opt.Progress(fmt.Sprintf("policy %s: producer -> consumer with an interfering allocator (%.0f s)", pol, ph.total()))
		s, err := runPolicy(ctx, rep, tmp, peer, pol, ph)
		last[pol] = s
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, _, _, ok := rep.RatioSpread(qosDeviation); ok {
		rep.TargetRatio(qosDeviation, "<=", 0.25)
	}
	var series []plot.Series
	for _, pol := range policies {
		series = append(series, last[pol])
	}
	return series, nil
}

// qosDeviation is the qos policy's target: |producer blocked % - the QoS
// target| / the QoS target after the interference starts, per round.
var qosDeviation = fmt.Sprintf("qos_producer_blocked_deviation_from_%.0fpct", policyQosPct)

var policies = []string{"max-throughput", "priority", "qos"}

// policyModes are the report rows of the policy experiment.
var policyModes = func() []string {
	var m []string
	for _, p := range policies {
		m = append(m, "policy_"+p)
	}
	return m
}()

func runPolicy(ctx context.Context, rep *benchkit.Report, tmp, peer, pol string, ph policyPhase) (plot.Series, error) {
	series := plot.Series{Name: pol}
	path := filepath.Join(tmp, "policy.shm")
	f, err := os.Create(path)
	if err != nil {
		return series, err
	}
	defer os.Remove(path)
	f.Truncate(int64(unsafe.Sizeof(pshm{})))
	mem, err := unix.Mmap(int(f.Fd()), 0, int(unsafe.Sizeof(pshm{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		return series, err
	}
	defer unix.Munmap(mem)
	sh := (*pshm)(unsafe.Pointer(&mem[0]))
	atomic.StoreUint64(&sh.Demand, ph.demand(0))

	mode := "policy_" + pol
	err = withManager(ctx, tmp, cbuf.ManagerOptions{Memory: policyMemory * 4096, Pool: 256 * 4096, Policy: pol}, func(sock string, m *cbuf.Manager) error {
		start := func(name string, env []string, args ...string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, peer, args...)
			cmd.Env = append(os.Environ(), append(env, "CBUF_NAME="+name)...)
			cmd.Stderr = os.Stderr
			return cmd, cmd.Start()
		}
		qos := "CBUF_QOS=0"
		if pol == "qos" {
			qos = "CBUF_QOS=" + strconv.FormatFloat(policyQosPct, 'f', -1, 64)
		}
		var cmds []*exec.Cmd
		defer func() {
			atomic.StoreUint64(&sh.Stop, 1)
			time.Sleep(300 * time.Millisecond)
			for _, c := range cmds {
				c.Process.Kill() // one blocked in an allocation never sees stop
				c.Wait()
			}
		}()
		for _, p := range []struct {
			name string
			env  []string
			args []string
		}{
			{"consumer", []string{"CBUF_PRIORITY=10"}, []string{"consumer", sock, path, "4", strconv.Itoa(policyHoldUs)}},
			{"producer", []string{"CBUF_PRIORITY=10", qos}, []string{"producer", sock, path, "4", strconv.Itoa(policyWorkNs)}},
			{"interferer", []string{"CBUF_PRIORITY=1"}, []string{"interferer", sock, path}},
		} {
			c, err := start(p.name, p.env, p.args...)
			if err != nil {
				return err
			}
			cmds = append(cmds, c)
		}
		t0 := time.Now()
		lastN, lastT := atomic.LoadUint64(&sh.Produced), t0
		var quietRate, intRate, prodBlk, intBlk, consBlk []float64
		var peakInt uint64
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case now := <-tick.C:
				t := now.Sub(t0).Seconds()
				if t >= ph.total() {
					rep.Sample(mode, "producer_msgs_per_sec_quiet", benchkit.Median(quietRate))
					rep.Sample(mode, "producer_msgs_per_sec_interference", mean(intRate))
					rep.Sample(mode, "producer_blocked_pct_interference", mean(prodBlk))
					rep.Sample(mode, "interferer_blocked_pct_interference", mean(intBlk))
					rep.Sample(mode, "consumer_blocked_pct_interference", mean(consBlk))
					rep.Sample(mode, "interferer_pool_pages_peak", float64(peakInt))
					if pol == "qos" {
						rep.SampleRatio(qosDeviation, abs(mean(prodBlk)-policyQosPct)/policyQosPct)
					}
					return nil
				}
				atomic.StoreUint64(&sh.Demand, ph.demand(t))
				n := atomic.LoadUint64(&sh.Produced)
				rate := float64(n-lastN) / now.Sub(lastT).Seconds()
				lastN, lastT = n, now
				series.X = append(series.X, t)
				series.Y = append(series.Y, rate)
				st := m.Stats()
				var pb, ib, cb float64
				for _, c := range st.Components {
					switch c.Name {
					case "producer":
						pb = c.BlockedPct
					case "interferer":
						ib = c.BlockedPct
						peakInt = max(peakInt, c.PoolPages)
					case "consumer":
						cb = c.BlockedPct
					}
				}
				if os.Getenv("CBUF_POLICY_TRACE") != "" {
					var pq, iq uint64
					for _, c := range st.Components {
						if c.Name == "producer" {
							pq = c.PoolPages
						} else if c.Name == "interferer" {
							iq = c.PoolPages
						}
					}
					fmt.Fprintf(os.Stderr, "%s t=%.2f rate=%.0f prod_blk=%.1f pool=%d int_blk=%.1f ipool=%d demand=%d\n", pol, t, rate, pb, pq, ib, iq, ph.demand(t))
				}
				if t < ph.quiet {
					if t > 0.5 {
						quietRate = append(quietRate, rate)
					}
				} else {
					intRate = append(intRate, rate)
					intBlk = append(intBlk, ib)
					consBlk = append(consBlk, cb)
					if t >= ph.quiet+policySettleS {
						prodBlk = append(prodBlk, pb)
					}
				}
			}
		}
	})
	return series, err
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
