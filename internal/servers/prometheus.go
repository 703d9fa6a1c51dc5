package servers

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PrometheusOptions configure StartPrometheus.
type PrometheusOptions struct {
	Targets        []string      // HOST:PORT of /metrics endpoints to scrape
	ScrapeInterval time.Duration // default 1s
	Port           int           // web port on 127.0.0.1; 0 picks a free one
}

// Prometheus is a running Prometheus server (Debian's package) with a
// configuration and storage of its own, in a temporary directory.
type Prometheus struct {
	Opt PrometheusOptions
	Dir string
	p   *proc
	log string
}

// URL is the server's base URL.
func (p *Prometheus) URL() string { return "http://127.0.0.1:" + strconv.Itoa(p.Opt.Port) }

// StartPrometheus writes a scrape configuration for opt.Targets and runs
// Prometheus until it reports ready.
func StartPrometheus(opt PrometheusOptions) (*Prometheus, error) {
	bin, err := lookPath("prometheus")
	if err != nil {
		return nil, err
	}
	if opt.ScrapeInterval == 0 {
		opt.ScrapeInterval = time.Second
	}
	if opt.Port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		opt.Port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	dir, err := os.MkdirTemp("", "cistern-prometheus-")
	if err != nil {
		return nil, err
	}
	targets, _ := json.Marshal(opt.Targets)
	cfg := fmt.Sprintf("global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n  - job_name: cistern\n    static_configs:\n      - targets: %s\n",
		opt.ScrapeInterval, opt.ScrapeInterval, targets)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	lf, err := logFile("prometheus")
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	c := command("", bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(opt.Port))
	c.Stdout, c.Stderr = lf, lf
	p, err := start(c)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	s := &Prometheus{Opt: opt, Dir: dir, p: p, log: lf.Name()}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r, err := http.Get(s.URL() + "/-/ready"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-p.exited:
			out, _ := os.ReadFile(lf.Name())
			s.Stop()
			return nil, fmt.Errorf("prometheus exited:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("prometheus not ready after 30s (log %s)", lf.Name())
		}
	}
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates a PromQL expression now through the HTTP API.
func (p *Prometheus) Query(promql string) ([]Sample, error) {
	r, err := http.Get(p.URL() + "/api/v1/query?query=" + url.QueryEscape(promql))
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("prometheus answer %q: %w", b, err)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", resp.Error)
	}
	var out []Sample
	for _, res := range resp.Data.Result {
		s, _ := res.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", res.Value[1], err)
		}
		out = append(out, Sample{Labels: res.Metric, Value: v})
	}
	return out, nil
}

// Stop terminates Prometheus and removes its directory.
func (p *Prometheus) Stop() {
	p.p.stop()
	os.RemoveAll(p.Dir)
	os.Remove(p.log)
}
