package cbuf

// Isolation across uids (#29, docs/cbuf.md "Threat model"): children run
// as nobody (65534) through setuid, against a manager run by root.

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cistern-ebpf/cistern/internal/testenv"
)

const nobody = 65534

// needRoot: the children run as nobody through setuid (a failure under
// CISTERN_REQUIRE_ALL=1).
func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
}

// isoManager runs a manager whose socket another uid can reach (its
// directory is 0755; the socket's own mode is the manager's).
func isoManager(t *testing.T, opt ManagerOptions) (*Manager, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cbuf-iso-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	opt.Socket = filepath.Join(dir, "cbuf.sock")
	if opt.Memory == 0 {
		opt.Memory = 16 << 20
	}
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return m, opt.Socket
}

var (
	nobodyOnce sync.Once
	nobodyDir  string
	nobodyErr  error
)

// nobodyCopy makes this test binary and the C peer executable by nobody
// (go test's work directory is private).
func nobodyCopy(t *testing.T) (testBin, peer string) {
	t.Helper()
	p := buildPeer(t)
	nobodyOnce.Do(func() {
		if nobodyDir, nobodyErr = os.MkdirTemp("", "cbuf-nobody-"); nobodyErr != nil {
			return
		}
		os.Chmod(nobodyDir, 0o755)
		for src, dst := range map[string]string{os.Args[0]: "cbuf.test", p: "peer"} {
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(nobodyDir, dst), b, 0o755)
			}
			if err != nil {
				nobodyErr = err
				return
			}
		}
	})
	if nobodyErr != nil {
		t.Fatal(nobodyErr)
	}
	return filepath.Join(nobodyDir, "cbuf.test"), filepath.Join(nobodyDir, "peer")
}

func asNobody(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	cmd.Dir = "/"
	return cmd
}

// iso is a child of this test binary running as nobody, driven line by
// line (isoHelper).
type iso struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startIso(t *testing.T, sock string) *iso {
	t.Helper()
	bin, _ := nobodyCopy(t)
	cmd := asNobody(exec.Command(bin))
	cmd.Env = append(os.Environ(), "CBUF_TEST_HELPER=iso", "CBUF_SOCK="+sock)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &iso{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return c
}

func (c *iso) do(line string) string {
	c.t.Helper()
	fmt.Fprintln(c.in, line)
	s, err := c.out.ReadString('\n')
	if err != nil {
		c.t.Fatalf("nobody child: %q: %v", line, err)
	}
	return strings.TrimSpace(s)
}

// isoHelper is the nobody side: "hello" connects (Connect's error
// otherwise), then commands from stdin, one answer line each.
func isoHelper() int {
	out := bufio.NewWriter(os.Stdout)
	say := func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...); out.Flush() }
	sc := bufio.NewScanner(os.Stdin)
	var c *Client
	held := map[ID][]byte{}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		arg := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 0, 64); return v }
		switch f[0] {
		case "hello":
			var err error
			if c, err = Connect(os.Getenv("CBUF_SOCK")); err != nil {
				say("refused %v", err)
				continue
			}
			say("token %d slot %d", c.Token(), c.Slot())
		case "buf": // buf ID SIZE: a reference, and the first 16 bytes
			b, err := c.Buf(ID(arg(1)), int(arg(2)))
			if err != nil {
				say("bad")
				continue
			}
			held[ID(arg(1))] = b
			say("ok %s", hex.EncodeToString(b[:16]))
		case "free":
			c.Free(ID(arg(1)))
			delete(held, ID(arg(1)))
			say("freed")
		case "write": // write ID: into a held buffer
			say("%s", tryWrite(held[ID(arg(1))]))
		case "dir": // entries of other components in this uid's directory
			n := 0
			for g := range c.dir {
				if d := loadDir(&c.dir[g]); d.NPages != 0 && uint32(g)/c.maxBufs != c.slot {
					n++
				}
			}
			say("dir %d", n)
		case "scan": // scan SECRET: MAP every slot, every forged id, and look for SECRET
			say("%s", isoScan(c, f[1]))
		case "mapbuf":
			if _, fds, err := c.xchg(msg{Op: opMapBuf, Arg2: arg(1)}, 1); err != nil {
				say("refused")
			} else {
				unix.Close(fds[0])
				say("ok")
			}
		case "pin": // pin SLOT: claim references and sends on that slot's first 64 indexes
			for idx := uint32(0); idx < 64; idx++ {
				atomic.AddUint64(&c.metas[c.g(uint32(arg(1)), idx)].Cnt, ref1|sent1)
			}
			say("pinned")
		case "fds":
			say("%s", helloFds(os.Getenv("CBUF_SOCK")))
		}
	}
	if c != nil {
		c.Close()
	}
	return 0
}

func tryWrite(b []byte) (res string) {
	if b == nil {
		return "nothing held"
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			res = "faulted"
		}
	}()
	b[0] ^= 1
	return "wrote"
}

// isoScan is the scenario: MAP each slot 0-63, MAPBUF forged ids
// of every other slot (indexes 0-3, generations 1-6), and search every
// byte it could map, and its directory, for the secret.
func isoScan(c *Client, secret string) string {
	maps, found, forged, tried := 0, 0, 0, 0
	look := func(b []byte) {
		if strings.Contains(string(b), secret) {
			found++
		}
	}
	for s := uint32(0); s < MaxComponents; s++ {
		if s == c.slot {
			continue
		}
		r, fds, err := c.xchg(msg{Op: opMap, Arg: s}, 1)
		if err != nil {
			continue
		}
		maps++
		size := c.poolLen
		if r.Arg2 != 0 {
			size = r.Arg2
		}
		if b, err := mapShared(fds[0], size, false); err == nil {
			look(b)
			unix.Munmap(b)
		}
		unix.Close(fds[0])
	}
	for s := uint32(0); s < MaxComponents; s++ {
		if s == c.slot {
			continue
		}
		for idx := uint32(0); idx < 4; idx++ {
			for gen := uint16(1); gen <= 6; gen++ {
				tried++
				r, fds, err := c.xchg(msg{Op: opMapBuf, Arg2: uint64(makeID(gen, s, idx))}, 1)
				if err != nil {
					continue
				}
				forged++
				if b, err := mapShared(fds[0], r.Arg2, false); err == nil {
					look(b)
					unix.Munmap(b)
				}
				unix.Close(fds[0])
			}
		}
	}
	dir := 0
	for g := range c.dir {
		if d := loadDir(&c.dir[g]); d.NPages != 0 && uint32(g)/c.maxBufs != c.slot {
			dir++
		}
	}
	look(c.dirMem)
	look(*c.pools[c.slot].Load())
	return fmt.Sprintf("dir %d maps %d forged %d/%d found %d", dir, maps, forged, tried, found)
}

// helloFds checks what HELLO's descriptors allow: no resizing of the meta
// and pool memfds, no writing of the directory (by a writable mapping, a
// write, or a read-write reopen through /proc).
func helloFds(sock string) string {
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	_, fds, err := (&Client{conn: conn}).xchg(msg{Op: opHello}, 3)
	if err != nil {
		return err.Error()
	}
	var res []string
	for i, name := range []string{"meta", "pool", "dir"} {
		e := unix.Ftruncate(fds[i], 1<<30)
		e2 := unix.Ftruncate(fds[i], 0)
		res = append(res, fmt.Sprintf("%s-resize %v/%v", name, errno(e), errno(e2)))
	}
	_, e := unix.Mmap(fds[2], 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	res = append(res, "dir-mmap-rw "+errno(e))
	_, e = unix.Pwrite(fds[2], []byte{1}, 0)
	res = append(res, "dir-write "+errno(e))
	_, e = unix.Open(fmt.Sprintf("/proc/self/fd/%d", fds[2]), unix.O_RDWR, 0)
	res = append(res, "dir-reopen-rw "+errno(e))
	_, e = unix.Open(fmt.Sprintf("/proc/self/fd/%d", fds[0]), unix.O_RDWR, 0)
	res = append(res, "meta-reopen-rw "+errno(e))
	for _, fd := range fds {
		unix.Close(fd)
	}
	return strings.Join(res, ", ")
}

func errno(err error) string {
	if err == nil {
		return "allowed"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// The first check: a default manager's socket is its uid's only.
func TestIsolationDefaultRefusesNobody(t *testing.T) {
	needRoot(t)
	_, sock := isoManager(t, ManagerOptions{})
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("default socket mode %v, want 0600", st.Mode().Perm())
	}
	if got := startIso(t, sock).do("hello"); !strings.HasPrefix(got, "refused") || !strings.Contains(got, "permission denied") {
		t.Fatalf("nobody against a default manager: %q, want refused (permission denied)", got)
	}
}

// --group admits a group by the socket's mode; an allow-list that leaves
// nobody out refuses it at accept, and counts it.
func TestIsolationAllowList(t *testing.T) {
	needRoot(t)
	m, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody), AllowUIDs: []uint32{4242}})
	st, _ := os.Stat(sock)
	if st.Mode().Perm() != 0o660 || st.Sys().(*syscall.Stat_t).Gid != nobody {
		t.Fatalf("socket with --group: mode %v gid %d, want 0660 and %d", st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid, nobody)
	}
	if got := startIso(t, sock).do("hello"); !strings.HasPrefix(got, "refused") {
		t.Fatalf("nobody not in the allow-list: %q, want refused", got)
	}
	if n := m.Stats().RefusedConn; n != 1 {
		t.Fatalf("refused connections %d, want 1", n)
	}
	_, sock2 := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody), AllowGIDs: []uint32{nobody}})
	if got := startIso(t, sock2).do("hello"); !strings.HasPrefix(got, "token") {
		t.Fatalf("nobody in an allowed group: %q, want admitted", got)
	}
}

// The scenario: a C component writes a secret into a buffer it
// never sends; nobody, admitted through --group, maps every slot, forges
// ids, asks for the real id and reads its directory: it gets nothing, and
// every refusal is counted against it.
func TestIsolationScenario(t *testing.T) {
	needRoot(t)
	m, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	secret := fmt.Sprintf("SECRET-%d", time.Now().UnixNano())
	owner := exec.Command(buildPeer(t), sock, "secret", secret)
	in, _ := owner.StdinPipe()
	out, _ := owner.StdoutPipe()
	owner.Stderr = os.Stderr
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); owner.Wait() }()
	var id uint64
	if _, err := fmt.Fscan(out, &id); err != nil {
		t.Fatal(err)
	}
	c := startIso(t, sock)
	hello := c.do("hello")
	if !strings.HasPrefix(hello, "token") {
		t.Fatalf("nobody through --group: %q", hello)
	}
	slot, _ := strconv.Atoi(strings.Fields(hello)[3])
	if got := c.do(fmt.Sprintf("buf %d 4096", id)); got != "bad" {
		t.Fatalf("nobody's cbuf2buf of the secret's id: %q, want bad", got)
	}
	if got := c.do(fmt.Sprintf("mapbuf %d", id)); got != "refused" {
		t.Fatalf("nobody's MAPBUF of the secret's id: %q, want refused", got)
	}
	got := c.do("scan " + secret)
	t.Logf("nobody: %s", got)
	if !strings.HasPrefix(got, "dir 0 maps 0 forged 0/1512 found 0") {
		t.Fatalf("nobody read something: %s", got)
	}
	s := m.Stats()
	var cs *ComponentStats
	for i := range s.Components {
		if s.Components[i].Slot == uint32(slot) {
			cs = &s.Components[i]
		}
	}
	if cs == nil || cs.UID != nobody || cs.RefusedMap != 63 || cs.RefusedIDs != 1+1512 {
		t.Fatalf("nobody's component in stats: %+v; want uid %d, 63 refused maps, 1513 refused ids", cs, nobody)
	}
	if s.RefusedMap != 63 || s.RefusedIDs != 1513 {
		t.Fatalf("manager totals: %d refused maps, %d refused ids", s.RefusedMap, s.RefusedIDs)
	}
}

// After a grant nobody reads exactly that buffer, read-only; the owner's
// other buffer stays out of reach, and only the granted one is in its
// directory.
func TestIsolationGrant(t *testing.T) {
	needRoot(t)
	_, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	a, err := ConnectWith(sock, ClientOptions{Name: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Export(); err != nil {
		t.Fatal(err)
	}
	b1, id1, err := a.Alloc(2 * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	b2, id2, _ := a.Alloc(PageSize)
	copy(b1, "granted buffer..")
	copy(b2, "private buffer..")
	c := startIso(t, sock)
	f := strings.Fields(c.do("hello"))
	tok, _ := strconv.ParseUint(f[1], 10, 64)
	if got := c.do("dir"); got != "dir 0" {
		t.Fatalf("before the grant: %s", got)
	}
	if got := c.do(fmt.Sprintf("buf %d 4096", id1)); got != "bad" {
		t.Fatalf("before the grant nobody read the buffer: %s", got)
	}
	if err := a.SendTo(id1, Token(tok)); err != nil {
		t.Fatal(err)
	}
	if got, want := c.do(fmt.Sprintf("buf %d 8192", id1)), "ok "+hex.EncodeToString([]byte("granted buffer..")); got != want {
		t.Fatalf("granted buffer: %q, want %q", got, want)
	}
	copy(b1, "changed by owner")
	if got, want := c.do(fmt.Sprintf("buf %d 4096", id1)), "ok "+hex.EncodeToString([]byte("changed by owner")); got != want {
		t.Fatalf("zero copy: %q, want %q", got, want)
	}
	if got := c.do("dir"); got != "dir 1" {
		t.Fatalf("after one grant: %s, want one entry", got)
	}
	if got := c.do(fmt.Sprintf("buf %d 4096", id2)); got != "bad" {
		t.Fatalf("ungranted buffer: %s", got)
	}
	if got := c.do(fmt.Sprintf("mapbuf %d", id2)); got != "refused" {
		t.Fatalf("MAPBUF of the ungranted buffer: %s", got)
	}
	if got := c.do(fmt.Sprintf("write %d", id1)); got != "faulted" {
		t.Fatalf("a write to the granted buffer: %s, want a fault", got)
	}
	if string(b1[:16]) != "changed by owner" {
		t.Fatalf("the owner's buffer changed: %q", b1[:16])
	}
	// a receiver cannot give away what it was not given
	if err := a.Grant(id2, Token(tok)^64); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("grant to a made-up token: %v, want ESRCH", err)
	}
}

// A killed receiver's grants are dropped, and the buffer it held is
// destroyed when dead (a new memfd and generation), never recycled.
func TestIsolationKilledReceiverDropsGrants(t *testing.T) {
	needRoot(t)
	m, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	a, err := ConnectWith(sock, ClientOptions{Name: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Export(); err != nil {
		t.Fatal(err)
	}
	_, id, err := a.Alloc(PageSize)
	if err != nil {
		t.Fatal(err)
	}
	c := startIso(t, sock)
	tok, _ := strconv.ParseUint(strings.Fields(c.do("hello"))[1], 10, 64)
	if err := a.SendTo(id, Token(tok)); err != nil {
		t.Fatal(err)
	}
	if got := c.do(fmt.Sprintf("buf %d 4096", id)); !strings.HasPrefix(got, "ok") {
		t.Fatal(got)
	}
	if s := m.Stats(); s.Grants != 1 {
		t.Fatalf("grants %d, want 1", s.Grants)
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	waitFor(t, "the killed receiver's grants to go", 5*time.Second*testenv.TimeScale(), func() bool { return m.Stats().Grants == 0 })
	a.Free(id)
	g := m.g(id.Slot(), id.Index())
	m.mu.Lock()
	m.collect(m.comps[id.Slot()], 0)
	gen := loadDir(&m.dir[g]).Gen
	_, kept := m.comps[id.Slot()].bfd[id.Index()]
	m.mu.Unlock()
	if gen == id.Gen() || kept {
		t.Fatalf("the granted buffer survived its last holder: generation %d (was %d), memfd kept %v", gen, id.Gen(), kept)
	}
}

// HELLO's descriptors cannot resize the memfds or write the directory.
func TestIsolationHelloFds(t *testing.T) {
	needRoot(t)
	_, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	c := startIso(t, sock)
	got := c.do("fds")
	t.Logf("nobody: %s", got)
	want := "meta-resize EPERM/EPERM, pool-resize EPERM/EPERM, dir-resize EINVAL/EINVAL, dir-mmap-rw EACCES, dir-write EBADF, dir-reopen-rw EACCES, meta-reopen-rw EACCES"
	if got != want {
		t.Fatalf("HELLO's descriptors:\n got %s\nwant %s", got, want)
	}
}

// An exporting owner still serves its own uid (Go and C receivers), and a
// C owner grants to a C receiver running as nobody.
func TestIsolationExportSameUIDAndC(t *testing.T) {
	needRoot(t)
	_, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	a, err := ConnectWith(sock, ClientOptions{Name: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Export(); err != nil {
		t.Fatal(err)
	}
	b, err := ConnectWith(sock, ClientOptions{Name: "same-uid"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var lines strings.Builder
	for i := 0; i < 40; i++ {
		buf, id, err := a.Alloc(PageSize * (1 + i%3))
		if err != nil {
			t.Fatal(err)
		}
		fill(buf, uint64(i)+7)
		a.Send(id)
		got, err := b.Buf(id, len(buf))
		if err != nil || !check(got, uint64(i)+7) {
			t.Fatalf("same-uid Go receiver of an exporting owner, buffer %d: %v", i, err)
		}
		b.Free(id)
		a.Send(id)
		fmt.Fprintf(&lines, "%d %d\n", id, uint64(i)+7)
		a.Free(id)
	}
	recv := exec.Command(buildPeer(t), sock, "recv", "4096")
	recv.Stdin = strings.NewReader(lines.String())
	if out, err := recv.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok 40 bad 0" {
		t.Fatalf("same-uid C receiver of an exporting owner: %s %v", out, err)
	}
	// C to C across uids: cbuf_self, cbuf_export, cbuf_send_to
	_, peer := nobodyCopy(t)
	rx := asNobody(exec.Command(peer, sock, "recvx", "8192"))
	rin, _ := rx.StdinPipe()
	rout, _ := rx.StdoutPipe()
	rx.Stderr = os.Stderr
	if err := rx.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(rout)
	var tok uint64
	if _, err := fmt.Fscanf(br, "token %d\n", &tok); err != nil {
		t.Fatal(err)
	}
	tx := exec.Command(buildPeer(t), sock, "sendx", "50", "8192")
	tx.Env = append(os.Environ(), fmt.Sprintf("CBUF_PEER=%d", tok))
	tin, _ := tx.StdinPipe()
	tout, _ := tx.StdoutPipe()
	tx.Stderr = os.Stderr
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(tout)
	for i := 0; i < 50 && sc.Scan(); i++ {
		fmt.Fprintln(rin, sc.Text())
	}
	rin.Close()
	res, _ := br.ReadString('\n')
	tin.Close()
	tx.Wait()
	rx.Wait()
	if strings.TrimSpace(res) != "ok 50 bad 0" {
		t.Fatalf("C receiver as nobody of a C owner's grants: %q", res)
	}
}

// A component of another uid cannot keep alive buffers it was never given
// by writing counts into its own counter words: the manager reads only a
// granted buffer's word from another uid.
func TestIsolationCannotPinOthersBuffers(t *testing.T) {
	needRoot(t)
	m, sock := isoManager(t, ManagerOptions{Group: strconv.Itoa(nobody)})
	a, err := ConnectWith(sock, ClientOptions{Name: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := startIso(t, sock)
	c.do("hello")
	if got := c.do(fmt.Sprintf("pin %d", a.Slot())); got != "pinned" {
		t.Fatal(got)
	}
	var ids []ID
	for i := 0; i < 8; i++ {
		_, id, err := a.Alloc(PageSize)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids { // shared with itself: garbage once freed, for the collector
		a.Send(id)
		if _, err := a.Buf(id, PageSize); err != nil {
			t.Fatal(err)
		}
		a.Free(id)
		a.Free(id)
	}
	live, total := m.Audit()
	if live != 0 || total < len(ids) {
		t.Fatalf("after nobody's claims: %d of %d buffers live, want 0", live, total)
	}
}
