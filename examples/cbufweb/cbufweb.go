// Command cbufweb builds and runs the CBUF web server (c/cbufweb.c: a front
// end, a content component and a cache, each its own process passing
// requests and bodies as CBUF ids) and the baselines it is compared with:
// nginx and Apache (mod_proxy_fcgi) in front of a libfcgi application
// (c/fcgiapp.c) that produces the same bodies (main.go: `cbufweb serve`,
// `cbufweb check`). `cistern bench cbuf --workload web` builds this program
// and runs it; every server runs as a private instance on 127.0.0.1 with
// its configuration in its own directory.
package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	cbufsrc "github.com/cistern-ebpf/cistern/lib/cbuf"
)

var (
	//go:embed c/cbufweb.c
	serverSrc []byte
	//go:embed c/fcgiapp.c
	fcgiSrc []byte
	//go:embed c/pattern.h
	patternH []byte
)

// Binaries are the built programs.
type Binaries struct {
	CBufWeb string // the server (front, content, cache, run)
	FCGIApp string // the libfcgi baseline application
}

// Build compiles cbufweb (with libcbuf) and the FastCGI application into
// dir with cc. Without libfcgi (Debian libfcgi-dev) FCGIApp is "" and err
// says so; CBufWeb is built either way.
func Build(dir string) (Binaries, error) {
	var b Binaries
	if err := os.MkdirAll(filepath.Join(dir, "include"), 0o755); err != nil {
		return b, err
	}
	if err := os.WriteFile(filepath.Join(dir, "include", "pattern.h"), patternH, 0o644); err != nil {
		return b, err
	}
	bin, err := cbufsrc.Build(dir, "cbufweb", map[string][]byte{"cbufweb.c": serverSrc})
	if err != nil {
		return b, err
	}
	b.CBufWeb = bin
	src := filepath.Join(dir, "fcgiapp.c")
	if err := os.WriteFile(src, fcgiSrc, 0o644); err != nil {
		return b, err
	}
	app := filepath.Join(dir, "fcgiapp")
	out, err := exec.Command("cc", "-O2", "-g", "-Wall", "-I"+filepath.Join(dir, "include"), src, "-o", app, "-lfcgi").CombinedOutput()
	if err != nil {
		return b, fmt.Errorf("building the FastCGI application (needs libfcgi-dev): %v\n%s", err, out)
	}
	b.FCGIApp = app
	return b, nil
}

// Checksum is the X-Checksum of a body: the sum of its little-endian
// 64-bit words, the last partial word zero-padded (pattern.h).
func Checksum(body []byte) uint64 {
	var s uint64
	n := len(body) / 8
	for i := 0; i < n; i++ {
		s += binary.LittleEndian.Uint64(body[i*8:])
	}
	if t := len(body) - n*8; t > 0 {
		var w [8]byte
		copy(w[:], body[n*8:])
		s += binary.LittleEndian.Uint64(w[:])
	}
	return s
}

// Expected returns the body every server must produce for size and seed.
func Expected(size int, seed uint64) []byte {
	b := make([]byte, (size+7)/8*8)
	v := (seed + 1) * 0x9E3779B97F4A7C15
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], v)
		v += 0xD1B54A32D192ED03
	}
	return b[:size]
}

// Check fetches url (a /gen or /cached request for size bytes with seed)
// and verifies status, Content-Length, X-Checksum and every byte.
func Check(c *http.Client, url string, size int, seed uint64) error {
	return CheckBody(c, url, size, seed, true)
}

// CheckBody is Check; without wantLength a chunked answer (no
// Content-Length: Apache's mod_proxy_fcgi sends one) is accepted when its
// body has the right size.
func CheckBody(c *http.Client, url string, size int, seed uint64, wantLength bool) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: reading the body: %v", url, err)
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: status %d: %.200s", url, resp.StatusCode, body)
	}
	if (wantLength || resp.ContentLength >= 0) && resp.ContentLength != int64(size) || len(body) != size {
		return fmt.Errorf("%s: Content-Length %d, body %d bytes, want %d", url, resp.ContentLength, len(body), size)
	}
	want := Expected(size, seed)
	if got, _ := strconv.ParseUint(resp.Header.Get("X-Checksum"), 16, 64); got != Checksum(want) {
		return fmt.Errorf("%s: X-Checksum %q, want %016x", url, resp.Header.Get("X-Checksum"), Checksum(want))
	}
	if Checksum(body) != Checksum(want) || string(body) != string(want) {
		for i := range body {
			if body[i] != want[i] {
				return fmt.Errorf("%s: body differs from byte %d on", url, i)
			}
		}
	}
	return nil
}

// Server is one running server (all its processes).
type Server struct {
	Name string
	URL  string // http://127.0.0.1:PORT
	Dir  string // its private directory (configuration, sockets, logs)
	// MetricsURL is cbufweb's --metrics endpoint ("" for the baselines).
	MetricsURL string

	cmds []*exec.Cmd
	cg   *CPUGroup
}

// Options for starting a server.
type Options struct {
	Dir    string // private directory (created; default: a new temp dir)
	Port   int    // 0: a free port
	Group  bool   // run every process in its own cpu accounting cgroup (CPU)
	Stderr io.Writer

	// cbufweb
	CBufSocket  string   // manager's socket; with ManagerArgv the manager is started here
	ManagerArgv []string // command that runs a manager (its --socket is appended)
	Cache       bool     // start the cache component too
	Send        string   // writev (default), zerocopy, splice
	Metrics     bool     // serve --metrics on another free port
	Env         []string // extra environment of cbufweb's components (CBUF_PRIORITY, CBUF_QOS)
	Pairs       int      // content component + front end pairs sharing the port (default 1)

	// baselines
	FCGIProcs int // FastCGI application processes (default 2)
	Workers   int // nginx worker processes / Apache child processes (default 2)
}

func (o *Options) defaults(name string) error {
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "cbufweb-"+name+"-")
		if err != nil {
			return err
		}
		o.Dir = d
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	// nginx's and Apache's workers run as www-data and must reach the sockets
	os.Chmod(o.Dir, 0o755)
	if o.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		o.Port = p
	}
	if o.FCGIProcs == 0 {
		o.FCGIProcs = 2
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.Stderr == nil {
		f, err := os.OpenFile(filepath.Join(o.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		o.Stderr = f // stays open while the processes write it
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(argv []string, dir string, stderr io.Writer, env ...string) error {
	var cmd *exec.Cmd
	if s.cg != nil {
		// join the group before exec, so every child is counted
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, s.cg.procs}, argv...)...)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmds = append(s.cmds, cmd)
	return nil
}

// Stop ends every process of the server (SIGTERM, then SIGKILL to its
// process group) and removes its cgroup; the directory stays.
func (s *Server) Stop() {
	for i := len(s.cmds) - 1; i >= 0; i-- {
		c := s.cmds[i]
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-done
		}
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // stragglers of the group
	}
	s.cmds = nil
	if s.cg != nil {
		s.cg.Remove()
	}
}

// CPU returns the CPU time all the server's processes used so far
// (Options.Group), 0 without a group.
func (s *Server) CPU() time.Duration {
	if s.cg == nil {
		return 0
	}
	return s.cg.Usage()
}

// Pid returns the pid cbufweb's supervisor last wrote for role (content,
// cache, front, run), 0 if none.
func (s *Server) Pid(role string) int {
	b, err := os.ReadFile(filepath.Join(s.Dir, role+".pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// WaitReady polls path until it answers 200.
func (s *Server) WaitReady(ctx context.Context, path string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		resp, err := c.Get(s.URL + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(s.Dir, s.Name+".log"))
			if len(log) > 1500 {
				log = log[len(log)-1500:]
			}
			return fmt.Errorf("%s not ready at %s%s: %v (logs in %s)\n%s", s.Name, s.URL, path, last, s.Dir, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func newServer(name string, o *Options) (*Server, error) {
	if err := o.defaults(name); err != nil {
		return nil, err
	}
	s := &Server{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d", o.Port), Dir: o.Dir}
	if o.Group {
		cg, err := NewCPUGroup(fmt.Sprintf("cistern-cbufweb-%s-%d-%d", name, os.Getpid(), o.Port))
		if err != nil {
			return nil, err
		}
		s.cg = cg
	}
	return s, nil
}

// StartCBufWeb starts cbufweb's supervisor (front, content and, with
// Cache, the cache) and, with ManagerArgv, a CBUF manager beside it.
func StartCBufWeb(ctx context.Context, bins Binaries, o Options) (*Server, error) {
	s, err := newServer("cbufweb", &o)
	if err != nil {
		return nil, err
	}
	if len(o.ManagerArgv) > 0 {
		o.CBufSocket = filepath.Join(o.Dir, "cbuf.sock")
		if err := s.start(append(append([]string{}, o.ManagerArgv...), "--socket", o.CBufSocket), o.Dir, o.Stderr); err != nil {
			return nil, err
		}
		for i := 0; ; i++ {
			if _, err := os.Stat(o.CBufSocket); err == nil {
				break
			}
			if i > 200 {
				s.Stop()
				return nil, fmt.Errorf("the CBUF manager did not create %s", o.CBufSocket)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	if o.CBufSocket == "" {
		return nil, errors.New("cbufweb needs a CBUF manager: CBufSocket or ManagerArgv")
	}
	argv := []string{bins.CBufWeb, "run", "--cbuf", o.CBufSocket, "--listen", fmt.Sprintf("127.0.0.1:%d", o.Port), "--dir", o.Dir}
	if o.Cache {
		argv = append(argv, "--cache")
	}
	if o.Pairs > 1 {
		argv = append(argv, "--workers", strconv.Itoa(o.Pairs))
	}
	if o.Send != "" {
		argv = append(argv, "--send", o.Send)
	}
	if o.Metrics {
		mp, err := FreePort()
		if err != nil {
			return nil, err
		}
		argv = append(argv, "--metrics", fmt.Sprintf("127.0.0.1:%d", mp))
		s.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", mp)
	}
	if err := s.start(argv, o.Dir, o.Stderr, o.Env...); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.WaitReady(ctx, "/health"); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) startFCGI(bins Binaries, o *Options) (string, error) {
	if bins.FCGIApp == "" {
		return "", errors.New("the FastCGI application was not built (libfcgi-dev missing)")
	}
	sock := filepath.Join(o.Dir, "fcgi.sock")
	if err := s.start([]string{bins.FCGIApp, sock, strconv.Itoa(o.FCGIProcs)}, o.Dir, o.Stderr); err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock, nil
		}
		if i > 200 {
			return "", errors.New("the FastCGI application did not create its socket")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// startFronted starts the FastCGI application, writes conf into the
// server's directory and starts argv (nginx or Apache) in front of it.
func startFronted(ctx context.Context, name string, bins Binaries, o Options, conf func(o *Options, sock string) (string, []string)) (*Server, error) {
	s, err := newServer(name, &o)
	if err != nil {
		return nil, err
	}
	sock, err := s.startFCGI(bins, &o)
	if err != nil {
		s.Stop()
		return nil, err
	}
	text, argv := conf(&o, sock)
	if err := os.WriteFile(filepath.Join(o.Dir, name+".conf"), []byte(text), 0o644); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.start(argv, o.Dir, o.Stderr); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.WaitReady(ctx, "/gen?size=1"); err != nil {
		log, _ := os.ReadFile(filepath.Join(o.Dir, name+"-error.log"))
		if len(log) > 2000 {
			log = log[len(log)-2000:]
		}
		s.Stop()
		return nil, fmt.Errorf("%v\n%s", err, log)
	}
	return s, nil
}

// StartNginx starts nginx (worker processes as www-data, no logging,
// responses buffered in memory) in front of the FastCGI application.
func StartNginx(ctx context.Context, bins Binaries, o Options) (*Server, error) {
	return startFronted(ctx, "nginx", bins, o, func(o *Options, sock string) (string, []string) {
		d := o.Dir
		conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes %d;
user www-data www-data;
pid %[2]s/nginx.pid;
error_log %[2]s/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[2]s/ngx-body;
    fastcgi_temp_path %[2]s/ngx-fastcgi;
    proxy_temp_path %[2]s/ngx-proxy;
    uwsgi_temp_path %[2]s/ngx-uwsgi;
    scgi_temp_path %[2]s/ngx-scgi;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    fastcgi_buffer_size 32k;
    fastcgi_buffers 128 32k;
    fastcgi_busy_buffers_size 64k;
    fastcgi_max_temp_file_size 0;
    server {
        listen 127.0.0.1:%[3]d;
        location /gen {
            fastcgi_param QUERY_STRING $query_string;
            fastcgi_param REQUEST_METHOD $request_method;
            fastcgi_param SCRIPT_NAME /gen;
            fastcgi_param SERVER_PROTOCOL $server_protocol;
            fastcgi_pass unix:%[4]s;
        }
    }
}
`, o.Workers, d, o.Port, sock)
		return conf, []string{"nginx", "-p", d, "-c", filepath.Join(d, "nginx.conf"), "-e", filepath.Join(d, "nginx-error.log")}
	})
}

// StartApache starts Apache (event MPM, Workers children, no logging) with
// mod_proxy_fcgi in front of the FastCGI application, as in the paper.
func StartApache(ctx context.Context, bins Binaries, o Options) (*Server, error) {
	return startFronted(ctx, "apache", bins, o, func(o *Options, sock string) (string, []string) {
		d := o.Dir
		m := "/usr/lib/apache2/modules/"
		conf := fmt.Sprintf(`ServerRoot %[1]s
DefaultRuntimeDir %[1]s
PidFile %[1]s/apache.pid
Mutex file:%[1]s default
ErrorLog %[1]s/apache-error.log
LogLevel warn
ServerName localhost
User www-data
Group www-data
Listen 127.0.0.1:%[2]d
LoadModule mpm_event_module %[3]smod_mpm_event.so
LoadModule authz_core_module %[3]smod_authz_core.so
LoadModule proxy_module %[3]smod_proxy.so
LoadModule proxy_fcgi_module %[3]smod_proxy_fcgi.so
StartServers %[4]d
ServerLimit %[4]d
ThreadsPerChild 64
MaxRequestWorkers %[5]d
MinSpareThreads 1
MaxSpareThreads %[5]d
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 65
ProxyPass "/gen" "unix:%[6]s|fcgi://localhost/gen"
`, d, o.Port, m, o.Workers, 64*o.Workers, sock)
		return conf, []string{"apache2", "-d", d, "-f", filepath.Join(d, "apache.conf"), "-DFOREGROUND"}
	})
}
