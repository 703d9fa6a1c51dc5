// Package vm boots one of Debian's kernels under qemu and runs a command
// inside it, on the host's own file system.
//
// The guest's root is the host's / shared read-only through virtiofs with a
// tmpfs overlay on top, as virtme-ng does: memcached, PostgreSQL, fio, the
// tree and the test binaries are there exactly as on the host, and nothing the
// guest writes reaches the host except through the results directory (a second,
// writable virtiofs share). Debian's cloud kernels have no 9p, and a disk
// image would have to copy what the tests need; virtiofs is a module on 5.10
// and 6.1 and built in on 6.12, and qemu 7.2 ships its daemon.
//
// The initramfs holds busybox-static, the kernel's own modules that the guest
// needs before it can reach the host (virtio_pci, virtiofs, overlay) and those
// the tests need (veth, sch_ingress, cls_bpf), decompressed and loaded in
// dependency order from modules.dep.
package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Kernel is one unpacked kernel (scripts/kernel-matrix/fetch-kernels.sh).
type Kernel struct {
	Suite   string // bullseye, bookworm, trixie, sid
	Release string // uname -r
	Dir     string
}

// CacheDir is where fetch-kernels.sh unpacks kernels.
const CacheDir = "/var/cache/cistern/kernels"

// Suite is one of Debian's suites whose cloud kernel the matrix boots.
type Suite struct {
	// Name is the short name the matrix prints; "" for sid, whose kernel
	// moves with unstable: it is named by the version fetched (Version).
	Name, Suite, Who string
}

// Suites lists the matrix's kernels, in table order.
var Suites = []Suite{
	{"6.1", "bookworm", "Debian 12, Amazon Linux 2023"},
	{"6.12", "trixie", "Debian 13, RHEL 10"},
	{"", "sid", "Debian unstable, the newest (Ubuntu 26.04 LTS runs 7.0)"},
	{"5.10", "bullseye", "Debian 11"},
}

// Version is the kernel's major.minor ("7.2" of "7.2.13+deb14-cloud-amd64").
func (k *Kernel) Version() string {
	parts := strings.SplitN(k.Release, ".", 3)
	if len(parts) < 2 {
		return k.Release
	}
	minor, _, _ := strings.Cut(parts[1], "-")
	return parts[0] + "." + minor
}

// Lookup finds a suite by its short name, its suite name, or (for sid) the
// version of the kernel fetched for it ("7.2").
func Lookup(name string) (Suite, bool) {
	for _, s := range Suites {
		if (s.Name != "" && s.Name == name) || s.Suite == name {
			return s, true
		}
	}
	for _, s := range Suites {
		if s.Name != "" {
			continue
		}
		if k, err := Open(s.Suite); err == nil && k.Version() == name {
			return s, true
		}
	}
	return Suite{}, false
}

// Names lists the names Lookup accepts, for messages.
func Names() string {
	var n []string
	for _, s := range Suites {
		if s.Name != "" {
			n = append(n, s.Name)
		} else {
			n = append(n, s.Suite+" (the newest, named by its version)")
		}
	}
	return strings.Join(n, ", ")
}

// Display is the name the tables show: the short name, or sid's version.
func (s Suite) Display(k *Kernel) string {
	if s.Name != "" || k == nil {
		return s.Name
	}
	return k.Version()
}

// Open finds an unpacked kernel of a suite.
func Open(suite string) (*Kernel, error) {
	dir := filepath.Join(CacheDir, suite)
	rel, err := os.ReadFile(filepath.Join(dir, "release"))
	if err != nil {
		return nil, fmt.Errorf("vm: kernel for %s not fetched (run scripts/kernel-matrix/fetch-kernels.sh %s): %w", suite, suite, err)
	}
	return &Kernel{Suite: suite, Release: strings.TrimSpace(string(rel)), Dir: dir}, nil
}

// Modules loaded in the initramfs, before the host is reachable and for the
// tests; one built into a kernel is skipped.
var Modules = []string{"virtio_pci", "virtiofs", "virtio_blk", "overlay", "veth", "sch_ingress", "cls_bpf", "act_bpf", "tun"}

func (k *Kernel) modDir() string { return filepath.Join(k.Dir, "lib", "modules", k.Release) }

// moduleOrder lists the module files to load for names, each after its
// dependencies, from modules.dep.
func (k *Kernel) moduleOrder(names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(k.modDir(), "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{} // path -> dependency paths
	byName := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		path, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[path] = strings.Fields(rest)
		base := filepath.Base(path)
		base = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(base, ".xz"), ".zst"), ".ko")
		byName[strings.ReplaceAll(base, "-", "_")] = path
	}
	var order []string
	seen := map[string]bool{}
	var visit func(p string)
	visit = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, d := range deps[p] {
			visit(d)
		}
		order = append(order, p)
	}
	for _, n := range names {
		if p, ok := byName[n]; ok {
			visit(p)
		}
	}
	return order, nil
}

// Initramfs builds (once per kernel and init version, cached beside it)
// the initramfs. Its name carries a hash of the init scripts and modules,
// so matrices of different trees (another branch's stage2) never boot
// each other's.
func (k *Kernel) Initramfs() (string, error) {
	out := filepath.Join(k.Dir, "initramfs-"+initHash()+".cpio.gz")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return "", errors.New("vm: busybox not found (apt install busybox-static)")
	}
	tmp, err := os.MkdirTemp("", "cistern-initramfs")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"bin", "proc", "sys", "dev", "host", "rw", "newroot", "mod"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := copyFile(busybox, filepath.Join(tmp, "bin", "busybox"), 0o755); err != nil {
		return "", err
	}
	order, err := k.moduleOrder(Modules)
	if err != nil {
		return "", err
	}
	var load strings.Builder
	for i, rel := range order {
		dst := fmt.Sprintf("%02d-%s", i, strings.TrimSuffix(strings.TrimSuffix(filepath.Base(rel), ".xz"), ".zst"))
		if err := decompressModule(filepath.Join(k.modDir(), rel), filepath.Join(tmp, "mod", dst)); err != nil {
			return "", err
		}
		load.WriteString(dst + "\n")
	}
	if err := os.WriteFile(filepath.Join(tmp, "mod", "order"), []byte(load.String()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "init"), []byte(initScript), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "stage2"), []byte(stage2), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet | gzip -1 > "+strconv.Quote(out+".tmp"+strconv.Itoa(os.Getpid())))
	cmd.Dir = tmp
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("vm: cpio: %v: %s", err, b)
	}
	return out, os.Rename(out+".tmp"+strconv.Itoa(os.Getpid()), out)
}

// initHash names the init scripts and module list an initramfs holds.
func initHash() string {
	h := uint32(0)
	for _, c := range initScript + stage2 + strings.Join(Modules, ",") {
		h = h*31 + uint32(c)
	}
	return fmt.Sprintf("%08x", h)
}

func decompressModule(src, dst string) error {
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(src, ".xz"):
		cmd = exec.Command("xz", "-dc", src)
	case strings.HasSuffix(src, ".zst"):
		cmd = exec.Command("zstd", "-dcq", src)
	default:
		return copyFile(src, dst, 0o644)
	}
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("vm: decompress %s: %w", src, err)
	}
	return os.WriteFile(dst, b, 0o644)
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// Options of one boot.
type Options struct {
	// Script is run by /bin/sh in the guest, with the host's file system as
	// root and the results directory at /results (its cwd).
	Script string
	// Results is the host directory shown writable at /results.
	Results string
	CPUs    int
	MemMB   int
	// Console receives the guest's console (kernel messages and the script's
	// output) as it arrives; nil discards it.
	Console io.Writer
}

// Result of one boot.
type Result struct {
	ExitCode int // the script's, or -1 if the guest never reported one
	Boot     time.Duration
	Elapsed  time.Duration
}

// Run boots the kernel, runs the script and powers off. ctx bounds the whole
// boot; a guest that hangs is killed.
func (k *Kernel) Run(ctx context.Context, opt Options) (*Result, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, errors.New("vm: qemu-system-x86_64 not found (apt install qemu-system-x86)")
	}
	vfsd := "/usr/lib/qemu/virtiofsd"
	if _, err := os.Stat(vfsd); err != nil {
		if vfsd, err = exec.LookPath("virtiofsd"); err != nil {
			return nil, errors.New("vm: virtiofsd not found (qemu-system-common or the virtiofsd package)")
		}
	}
	initrd, err := k.Initramfs()
	if err != nil {
		return nil, err
	}
	if opt.CPUs == 0 {
		opt.CPUs = 2
	}
	if opt.MemMB == 0 {
		opt.MemMB = 3072
	}
	sock, err := os.MkdirTemp("", "cistern-vm")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(sock)
	if err := os.MkdirAll(opt.Results, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opt.Results, "run.sh"), []byte(opt.Script), 0o755); err != nil {
		return nil, err
	}
	os.Remove(filepath.Join(opt.Results, "exit-code"))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var daemons []*exec.Cmd
	for _, sh := range []struct{ tag, dir string }{{"host", "/"}, {"results", opt.Results}} {
		d := exec.CommandContext(ctx, vfsd, "--socket-path="+filepath.Join(sock, sh.tag),
			"-o", "source="+sh.dir, "-o", "cache=auto", "-o", "sandbox=chroot", "--thread-pool-size=4")
		d.Stdout, d.Stderr = io.Discard, io.Discard
		if err := d.Start(); err != nil {
			return nil, fmt.Errorf("vm: virtiofsd: %w", err)
		}
		daemons = append(daemons, d)
	}
	defer func() {
		for _, d := range daemons {
			d.Process.Kill()
			d.Wait()
		}
	}()
	for _, tag := range []string{"host", "results"} {
		if err := waitFile(ctx, filepath.Join(sock, tag)); err != nil {
			return nil, err
		}
	}

	// TMPDIR (/cistern-scratch) is an ext4 disk, as /tmp is on a user's
	// machine: files on tmpfs (shmem) never pass the filemap tracepoints
	// the page-cache agent follows.
	disk := filepath.Join(sock, "tmp.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", disk, "8G").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("vm: mkfs.ext4 for the guest's /tmp: %v: %s", err, out)
	}
	mem := strconv.Itoa(opt.MemMB) + "M"
	args := []string{
		"-nodefaults", "-no-reboot", "-nographic", "-display", "none",
		"-accel", accel(), "-cpu", "max", "-smp", strconv.Itoa(opt.CPUs), "-m", mem,
		"-object", "memory-backend-memfd,id=mem,size=" + mem + ",share=on", "-numa", "node,memdev=mem",
		"-chardev", "socket,id=fs0,path=" + filepath.Join(sock, "host"),
		"-device", "vhost-user-fs-pci,chardev=fs0,tag=host",
		"-chardev", "socket,id=fs1,path=" + filepath.Join(sock, "results"),
		"-device", "vhost-user-fs-pci,chardev=fs1,tag=results",
		"-drive", "file=" + disk + ",if=virtio,format=raw,cache=unsafe,discard=unmap",
		"-serial", "stdio",
		"-kernel", filepath.Join(k.Dir, "vmlinuz"), "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4 mitigations=off tsc=reliable",
	}
	q := exec.CommandContext(ctx, qemu, args...)
	q.Stdin = nil
	var console bytes.Buffer
	w := io.Writer(&console)
	if opt.Console != nil {
		w = io.MultiWriter(&console, opt.Console)
	}
	bootSeen := make(chan time.Time, 1)
	q.Stdout = &markWriter{w: w, mark: []byte("cistern-vm: running"), seen: bootSeen}
	q.Stderr = w
	start := time.Now()
	if err := q.Run(); err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("vm: qemu: %v\n%s", err, tail(console.String(), 2000))
	}
	res := &Result{ExitCode: -1, Elapsed: time.Since(start)}
	select {
	case t := <-bootSeen:
		res.Boot = t.Sub(start)
	default:
	}
	if b, err := os.ReadFile(filepath.Join(opt.Results, "exit-code")); err == nil {
		res.ExitCode, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("vm: %s did not finish in time (killed)\n%s", k.Release, tail(console.String(), 2000))
	}
	if res.ExitCode < 0 {
		return res, fmt.Errorf("vm: %s: the guest stopped without running the script\n%s", k.Release, tail(console.String(), 3000))
	}
	return res, nil
}

// accel picks KVM when asked for (CISTERN_VM_KVM=1), TCG otherwise: under
// nested virtualisation on the development machines KVM hangs at early boot.
// TCG runs single-threaded: with one host thread per vCPU, the kernel's live
// code patching (int3 then the new bytes, when a tracepoint's static key
// flips as BPF programs attach and detach) raced with the other vCPU's
// translated code and oopsed 6.12 ("int3" in syscall_trace_enter).
func accel() string {
	if os.Getenv("CISTERN_VM_KVM") == "1" {
		return "kvm"
	}
	return "tcg,thread=single"
}

func waitFile(ctx context.Context, p string) error {
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("vm: virtiofsd did not create %s", p)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// markWriter notes the first time mark appears in the stream.
type markWriter struct {
	w    io.Writer
	mark []byte
	seen chan time.Time
	buf  []byte
	done bool
}

func (m *markWriter) Write(p []byte) (int, error) {
	if !m.done {
		m.buf = append(m.buf, p...)
		if bytes.Contains(m.buf, m.mark) {
			m.done = true
			m.seen <- time.Now()
			m.buf = nil
		} else if len(m.buf) > 4096 {
			m.buf = m.buf[len(m.buf)-len(m.mark):]
		}
	}
	return m.w.Write(p)
}

// GuestMounts are the guest's own file systems over the host's tree (see
// stage2): below them the guest does not see the host's files.
var GuestMounts = []string{"/proc", "/sys", "/dev", "/run", "/results", "/cistern-scratch"}

// Visible says, in one sentence, why the guest cannot see the host's path
// (a tree the matrix must test there), or returns nil.
func Visible(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for _, m := range GuestMounts {
		if abs == m || strings.HasPrefix(abs, m+"/") {
			return fmt.Errorf("%s is under %s, which the guest mounts for itself, so it cannot see this tree there: clone it elsewhere (any other directory, /tmp included)", abs, m)
		}
	}
	return nil
}
