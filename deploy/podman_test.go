package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/cistern-ebpf/cistern/internal/servers"
	"github.com/cistern-ebpf/cistern/internal/testenv"
)

// TestDaemonSetUnderPodman runs the DaemonSet's pod template under a real
// container runtime: podman with runc (crun refuses this machine's hybrid
// cgroup layout), the image `make image` builds (a static cistern FROM
// scratch, no registry), each container with exactly the manifest's user,
// capabilities, hostPID and host paths, and the ConfigMap mounted where
// the manifest mounts it. Podman has no DaemonSet (kube play takes Pods),
// so the template's containers are run with podman run, sharing one
// network namespace as a pod's do; the exporter's port is published on
// 127.0.0.1 only (slirp4netns), as a node's Prometheus would reach it.
//
// It checks that the real Prometheus scrapes the exporter's query series;
// that the capture container records a psql query sent from the host to a
// PostgreSQL with TLS on the host, on its log; and that each capability
// the manifest gives is needed: without it, the container fails (the table
// in deploy/README.md says how).
func TestDaemonSetUnderPodman(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.NeedServers(t)
	podman := testenv.NeedTool(t, "podman", "podman")
	testenv.NeedTool(t, "runc", "runc")
	testenv.NeedTool(t, "slirp4netns", "slirp4netns")
	ds, cm := loadManifests(t)
	p := newPod(t, podman, ds.Spec.Template.Spec, cm)

	tc := testenv.TLSCert(t)
	pg := testenv.Postgres(t, servers.PostgresOptions{Port: 54381, Conf: tc.PostgresConf()})

	exp, capt := p.container("exporter"), p.container("capture")
	port, capPort := freePort(t), freePort(t)
	expName := p.run(t, "exporter", exp, exp.SecurityContext.Capabilities.Add,
		"--network", "slirp4netns", "-p", fmt.Sprintf("127.0.0.1:%d:9435", port), "-p", fmt.Sprintf("127.0.0.1:%d:9436", capPort))
	if err := p.waitMetrics(expName, port, 90*time.Second); err != nil {
		t.Fatalf("exporter: %v\n%s", err, p.logs(expName))
	}
	prom := testenv.Prometheus(t, servers.PrometheusOptions{Targets: []string{fmt.Sprintf("127.0.0.1:%d", port)}})
	capName := p.run(t, "capture", capt, capt.SecurityContext.Capabilities.Add, "--network", "container:"+expName)

	t.Run("prometheus-scrapes-exporter", func(t *testing.T) {
		var last string
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			s, err := prom.Query(`count({__name__=~"cistern_query_syscalls_.*"})`)
			if err == nil && len(s) == 1 && s[0].Value > 0 {
				t.Logf("Prometheus holds %v cistern_query_syscalls_* series scraped from the exporter container", s[0].Value)
				return
			}
			last = fmt.Sprint(s, err)
		}
		t.Fatalf("Prometheus has no cistern_query_syscalls_* series from the exporter container: %s\n%s", last, p.logs(expName))
	})
	t.Run("capture-records-host-psql", func(t *testing.T) {
		rec, err := p.captured(capName, pg, 90*time.Second)
		if err != nil {
			var counters string
			if r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", capPort)); err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "cistern_") {
						counters += l + "\n"
					}
				}
			}
			t.Fatalf("%v\n%s\ncapture's counters:\n%s", err, p.logs(capName), counters)
		}
		t.Logf("the capture container's log: %s", rec)
	})
	p.rm(capName)
	p.rm(expName)

	// The doctor in the exporter's container (its env: CISTERN_AGENT=1)
	// lists no development tool as missing.
	t.Run("doctor-agent-mode", func(t *testing.T) {
		d := exp
		d.Args = []string{"doctor"}
		name := p.run(t, "doctor", d, exp.SecurityContext.Capabilities.Add, "--network", "none")
		exec.Command(p.podman, "wait", name).Run()
		out := p.logs(name)
		if strings.Contains(out, "apt-get install") || !strings.Contains(out, "agent mode") || !strings.Contains(out, "SYSTEM") {
			t.Errorf("doctor in the agent container:\n%s", out)
		}
	})

	// Each capability: run the container alone without it.
	bounding := boundingCaps(t)
	for _, c := range []corev1.Container{exp, capt} {
		for _, cp := range c.SecurityContext.Capabilities.Add {
			t.Run(c.Name+"-without-"+string(cp), func(t *testing.T) {
				if !bounding["CAP_"+string(cp)] {
					t.Logf("| %s | %s | not checkable here: this machine's bounding set lacks it, so no container gets it (and the rest works without it) |", c.Name, cp)
					return
				}
				var caps []corev1.Capability
				for _, o := range c.SecurityContext.Capabilities.Add {
					if o != cp {
						caps = append(caps, o)
					}
				}
				why := p.breaks(t, c, caps, pg)
				if why == "" {
					t.Errorf("%s works without CAP_%s: remove it from the manifest", c.Name, cp)
					return
				}
				t.Logf("| %s | %s | %s |", c.Name, cp, why)
			})
		}
	}
}

// pod runs the containers of one pod template.
type pod struct {
	podman, image, config string
	spec                  corev1.PodSpec
	nofile                uint64
	seq                   int
}

// newPod builds the image as `make image` does (scripts/build-static.sh
// with the host's Go, deploy/Containerfile.local) under a name of its own,
// removed at the end, and writes the ConfigMap's files for its mount.
func newPod(t *testing.T, podman string, spec corev1.PodSpec, cm *corev1.ConfigMap) *pod {
	t.Helper()
	ctx := t.TempDir()
	if out, err := exec.Command("../scripts/build-static.sh", filepath.Join(ctx, "cistern")).CombinedOutput(); err != nil {
		t.Fatalf("scripts/build-static.sh: %v\n%s", err, out)
	}
	cf, err := os.ReadFile("Containerfile.local")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctx, "Containerfile"), cf, 0o644)
	image := fmt.Sprintf("localhost/cistern-test:%d", os.Getpid())
	start := time.Now()
	if out, err := exec.Command(podman, "build", "--quiet", "-t", image, ctx).CombinedOutput(); err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}
	t.Logf("podman build (FROM scratch, a static cistern): %s", time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() { exec.Command(podman, "rmi", "-f", image).Run() })
	config := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(config, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	return &pod{podman: podman, image: image, config: config, spec: spec, nofile: rl.Max}
}

func (p *pod) container(name string) corev1.Container {
	for _, c := range p.spec.Containers {
		if c.Name == name {
			return c
		}
	}
	panic("no container " + name + " in the DaemonSet")
}

// run starts container c with capabilities caps (the manifest's, or fewer)
// and the manifest's everything else; net are podman's network flags.
func (p *pod) run(t *testing.T, name string, c corev1.Container, caps []corev1.Capability, net ...string) string {
	t.Helper()
	p.seq++
	cname := fmt.Sprintf("cistern-test-%d-%s-%d", os.Getpid(), name, p.seq)
	// runc, not crun: crun refuses hybrid cgroups. The open-files limit is
	// this process's own hard limit (podman's default is above it here),
	// and the process limit one any host allows.
	args := []string{"--runtime", "runc", "run", "-d", "--name", cname, "--log-driver", "k8s-file",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", p.nofile, p.nofile), "--ulimit", "nproc=4096:4096"}
	if p.spec.HostPID {
		args = append(args, "--pid", "host")
	}
	sc := c.SecurityContext
	// Kubernetes runs a container with no seccompProfile Unconfined (unless
	// the kubelet's SeccompDefault is on); podman would apply its default
	// profile, which allows bpf() and perf_event_open() only with
	// CAP_SYS_ADMIN.
	switch sp := seccomp(p.spec, c); {
	case sp == nil || sp.Type == corev1.SeccompProfileTypeUnconfined:
		args = append(args, "--security-opt", "seccomp=unconfined")
	case sp.Type == corev1.SeccompProfileTypeRuntimeDefault:
	default:
		t.Fatalf("%s: seccomp profile %s: not run here", c.Name, sp.Type)
	}
	for _, e := range c.Env {
		args = append(args, "--env", e.Name+"="+e.Value)
	}
	if sc.RunAsUser != nil {
		args = append(args, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
	}
	for _, d := range sc.Capabilities.Drop {
		args = append(args, "--cap-drop", string(d))
	}
	for _, a := range caps {
		args = append(args, "--cap-add", string(a))
	}
	args = append(args, net...)
	for _, m := range c.VolumeMounts {
		var src string
		for _, v := range p.spec.Volumes {
			switch {
			case v.Name != m.Name:
			case v.HostPath != nil:
				src = v.HostPath.Path
			case v.ConfigMap != nil:
				src = p.config
			}
		}
		if src == "" {
			t.Fatalf("%s: volume %s is neither a hostPath nor the ConfigMap", c.Name, m.Name)
		}
		opt := ""
		if m.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "-v", src+":"+m.MountPath+opt)
	}
	if len(c.Command) > 0 {
		t.Fatalf("%s: the manifest overrides the entrypoint: %v", c.Name, c.Command)
	}
	args = append(append(args, p.image), c.Args...)
	if out, err := exec.Command(p.podman, args...).CombinedOutput(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() { p.rm(cname) })
	return cname
}

func seccomp(spec corev1.PodSpec, c corev1.Container) *corev1.SeccompProfile {
	if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		return c.SecurityContext.SeccompProfile
	}
	if spec.SecurityContext != nil {
		return spec.SecurityContext.SeccompProfile
	}
	return nil
}

func (p *pod) rm(name string) { exec.Command(p.podman, "rm", "-f", "-t", "2", name).Run() }

func (p *pod) logs(name string) string {
	out, _ := exec.Command(p.podman, "logs", name).CombinedOutput()
	return string(out)
}

func (p *pod) running(name string) bool {
	out, _ := exec.Command(p.podman, "inspect", "--format", "{{.State.Running}}", name).Output()
	return strings.TrimSpace(string(out)) == "true"
}

// captured sends a marked query with psql from the host every second
// until the capture container's log holds a record of it.
func (p *pod) captured(name string, pg *servers.Postgres, within time.Duration) (string, error) {
	// The mark is a column name: the manifest's capture sanitizes literals.
	tok := "cistern_podman_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var psqlErr error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		if !p.running(name) {
			return "", fmt.Errorf("the capture container exited")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if out, err := exec.CommandContext(ctx, pg.Bin("psql"), "-X", "-A", "-t", "-q", "-c", "SELECT 1 AS "+tok,
			fmt.Sprintf("sslmode=require host=127.0.0.1 port=%d user=postgres dbname=postgres", pg.Opt.Port)).CombinedOutput(); err != nil {
			psqlErr = fmt.Errorf("psql: %v: %s", err, out)
		}
		cancel()
		for _, l := range strings.Split(p.logs(name), "\n") {
			if strings.Contains(l, tok) && strings.Contains(l, `"query"`) {
				return l, nil
			}
		}
	}
	return "", fmt.Errorf("no record of psql's query %q in the capture container's log after %s (last psql error: %v)", tok, within, psqlErr)
}

// breaks runs c alone with caps and says what fails, "" when it works:
// the exporter must serve its metrics, capture must record a query.
func (p *pod) breaks(t *testing.T, c corev1.Container, caps []corev1.Capability, pg *servers.Postgres) string {
	t.Helper()
	switch c.Name {
	case "exporter":
		port := freePort(t)
		name := p.run(t, c.Name, c, caps, "--network", "slirp4netns", "-p", fmt.Sprintf("127.0.0.1:%d:9435", port))
		defer p.rm(name)
		if err := p.waitMetrics(name, port, 60*time.Second); err != nil {
			if l := lastLine(p.logs(name)); l != "" {
				return l
			}
			return err.Error()
		}
		return ""
	case "capture":
		name := p.run(t, c.Name, c, caps, "--network", "none")
		defer p.rm(name)
		if _, err := p.captured(name, pg, 45*time.Second); err != nil {
			if l := lastLine(p.logs(name)); l != "" {
				return err.Error() + ": " + l
			}
			return err.Error()
		}
		return ""
	}
	t.Fatalf("no check for container %s", c.Name)
	return ""
}

// waitMetrics waits until /metrics on 127.0.0.1:port holds series of
// every query of the exporter's configuration (syscalls and exits), the
// container running.
func (p *pod) waitMetrics(name string, port int, within time.Duration) error {
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if !p.running(name) {
			return fmt.Errorf("the exporter container exited")
		}
		r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), "cistern_query_syscalls_") && strings.Contains(string(b), "cistern_query_exits_") {
			return nil
		}
		last = fmt.Errorf("no cistern_query_syscalls_ and cistern_query_exits_ series in /metrics")
	}
	return fmt.Errorf("no metrics on 127.0.0.1:%d after %s: %v", port, within, last)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// boundingCaps is this process's capability bounding set by name: a
// container cannot get a capability outside it.
func boundingCaps(t *testing.T) map[string]bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var mask uint64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			mask, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	names := map[int]string{unix.CAP_SYS_ADMIN: "CAP_SYS_ADMIN", unix.CAP_SYS_PTRACE: "CAP_SYS_PTRACE",
		unix.CAP_SYS_RESOURCE: "CAP_SYS_RESOURCE", unix.CAP_BPF: "CAP_BPF", unix.CAP_PERFMON: "CAP_PERFMON",
		unix.CAP_NET_ADMIN: "CAP_NET_ADMIN", unix.CAP_KILL: "CAP_KILL", unix.CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE",
		unix.CAP_IPC_LOCK: "CAP_IPC_LOCK", unix.CAP_SYS_CHROOT: "CAP_SYS_CHROOT"}
	out := map[string]bool{}
	for bit, n := range names {
		out[n] = mask&(1<<bit) != 0
	}
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
