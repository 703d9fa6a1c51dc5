package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const usage = `usage:
  cbufweb build --dir DIR
      builds the C programs (cbufweb, and fcgiapp with libfcgi) into DIR and
      prints their paths as one JSON line {"cbufweb", "fcgiapp"}.
  cbufweb serve --server cbufweb|nginx|apache [--build-dir DIR | --bins DIR] [--dir DIR] [--group]
                [--pairs N] [--cbuf SOCK] [--send writev|zerocopy|splice] [--metrics]
                [--cache] [--env K=V]... [-- MANAGER ARGV...]
      builds the C programs into --build-dir (or takes those that build put in
      --bins), starts the server, prints one JSON
      line {"url", "metrics_url", "dir"} and then serves until stdin closes or a
      SIGTERM; the line "cpu" on stdin is answered with {"cpu_ns": N}, the CPU
      time of all the server's processes so far (--group). For cbufweb, either
      --cbuf names a running CBUF manager's socket, or the words after -- are a
      command that runs one (its --socket is appended).
  cbufweb check --url URL --size N --seed S [--chunked]
      fetches URL and checks status, length, X-Checksum and every byte
      (--chunked: an answer without Content-Length is accepted, as Apache's).
`

// The example as a program: `cistern bench cbuf --workload web` builds it
// and runs its servers through it, as any user of the example would.
func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "check":
		err = check(os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "cbufweb: %v\n%s", err, usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "cbufweb: %v\n", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, ",") }
func (e *envFlag) Set(s string) error { *e = append(*e, s); return nil }

// Started is the line serve prints once the server answers.
type Started struct {
	URL        string `json:"url"`
	MetricsURL string `json:"metrics_url,omitempty"`
	Dir        string `json:"dir"`
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	server := fs.String("server", "", "cbufweb, nginx or apache")
	buildDir := fs.String("build-dir", "/var/cache/cistern/cbuf/web", "where the C programs are built")
	binDir := fs.String("bins", "", "use the programs `cbufweb build` put in this directory")
	var o Options
	var env envFlag
	fs.StringVar(&o.Dir, "dir", "", "the server's private directory (default: a new temporary one)")
	fs.BoolVar(&o.Group, "group", false, "count every process's CPU in a cgroup of its own")
	fs.IntVar(&o.Pairs, "pairs", 0, "cbufweb: front end and content pairs sharing the port")
	fs.StringVar(&o.CBufSocket, "cbuf", "", "cbufweb: a running CBUF manager's socket")
	fs.StringVar(&o.Send, "send", "", "cbufweb: writev (default), zerocopy or splice")
	fs.BoolVar(&o.Metrics, "metrics", false, "cbufweb: serve /metrics on another free port")
	fs.BoolVar(&o.Cache, "cache", false, "cbufweb: start the cache component too")
	fs.Var(&env, "env", "cbufweb: K=V in its components' environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	o.ManagerArgv, o.Env = fs.Args(), env
	start := map[string]func(context.Context, Binaries, Options) (*Server, error){
		"cbufweb": StartCBufWeb, "nginx": StartNginx, "apache": StartApache,
	}[*server]
	if start == nil {
		return usageError{fmt.Errorf("--server %q: want cbufweb, nginx or apache", *server)}
	}
	var bins Binaries
	var err error
	if *binDir != "" {
		bins = built(*binDir)
	} else if bins, err = Build(*buildDir); err != nil && (*server != "cbufweb" || bins.CBufWeb == "") {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := start(ctx, bins, o)
	cancel()
	if err != nil {
		return err
	}
	defer srv.Stop()
	line, _ := json.Marshal(Started{srv.URL, srv.MetricsURL, srv.Dir})
	if _, err := fmt.Printf("%s\n", line); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "cpu" {
				fmt.Printf("{\"cpu_ns\":%d}\n", srv.CPU().Nanoseconds())
			}
		}
	}()
	select {
	case <-sig:
	case <-closed:
	}
	return nil
}

// builtLine is the line build prints.
type builtLine struct {
	CBufWeb string `json:"cbufweb"`
	FCGIApp string `json:"fcgiapp,omitempty"`
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	dir := fs.String("dir", "", "where to build")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *dir == "" {
		return usageError{errors.New("build needs --dir")}
	}
	b, err := Build(*dir)
	if b.CBufWeb == "" {
		return err
	}
	if err != nil { // no libfcgi: the baselines cannot run, cbufweb can
		fmt.Fprintf(os.Stderr, "cbufweb: %v\n", err)
	}
	line, _ := json.Marshal(builtLine{b.CBufWeb, b.FCGIApp})
	_, werr := fmt.Printf("%s\n", line)
	return werr
}

// built returns the programs build left in dir (FCGIApp "" without it).
func built(dir string) Binaries {
	b := Binaries{CBufWeb: filepath.Join(dir, "cbufweb")}
	if _, err := os.Stat(filepath.Join(dir, "fcgiapp")); err == nil {
		b.FCGIApp = filepath.Join(dir, "fcgiapp")
	}
	return b
}

func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	url := fs.String("url", "", "a /gen or /cached URL")
	size := fs.Int("size", -1, "the body's size in bytes")
	seed := fs.Uint64("seed", 0, "the body's seed")
	chunked := fs.Bool("chunked", false, "accept an answer without Content-Length")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *url == "" || *size < 0 {
		return usageError{errors.New("check needs --url and --size")}
	}
	return CheckBody(&http.Client{Timeout: 30 * time.Second}, *url, *size, *seed, !*chunked)
}
