package rxeinterop

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/capture"
)

// The harness's fixed addresses (run-peer.sh): the guest with rxe0 on eth0,
// and this machine's side of the bridge, inside the harness's namespace.
const (
	hostIP  = "10.99.0.1"
	guestIP = "10.99.0.2"
)

// iters is the number of exchanges of each run: rdma_rxe under software
// emulation is slow.
const iters = 10

// ppPort is the pingpong exchange's TCP port.
const ppPort = 18515

// TestPingpongRxe runs goroce pingpong against rdma-core's ibv_rc_pingpong
// and ibv_ud_pingpong on rdma_rxe, each program as server and as client,
// and checks both reports and the capture of the traffic.
//
// The runs are pairs on the package's shared guest (see guest), each
// through the harness's job directory (share/jobs) with its own capture.
func TestPingpongRxe(t *testing.T) {
	h := newHarness(t)
	gcmd := fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n %d", h.gidx, iters)
	hargs := h.goroceArgs("rc", hostIP, guestIP)
	h.startPeer("rc-rxe-server", gcmd, shellJoin(hargs))

	t.Run("rc/rxe-server", func(t *testing.T) {
		r := h.peerResult(t)
		h.check(t, r, 4096)
	})
	t.Run("rc/goroce-server", func(t *testing.T) {
		r := h.pair(t, "rc-goroce-server", fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n %d %s", h.gidx, iters, hostIP),
			h.goroceArgs("rc", hostIP, ""), true)
		h.check(t, r, 4096)
	})
	t.Run("ud/rxe-server", func(t *testing.T) {
		r := h.pair(t, "ud-rxe-server", fmt.Sprintf("ibv_ud_pingpong -d rxe0 -g %d -n %d", h.gidx, iters),
			h.goroceArgs("ud", hostIP, guestIP), false)
		h.check(t, r, 1024)
	})
	t.Run("ud/goroce-server", func(t *testing.T) {
		r := h.pair(t, "ud-goroce-server", fmt.Sprintf("ibv_ud_pingpong -d rxe0 -g %d -n %d %s", h.gidx, iters, hostIP),
			h.goroceArgs("ud", hostIP, ""), true)
		h.check(t, r, 1024)
	})
	// srq_pingpong: its 256 addresses each way whatever -q, the QPs
	// sharing one receive queue on both sides; 4 QPs one way, the default
	// 16 the other.
	t.Run("srq/rxe-server", func(t *testing.T) {
		r := h.pair(t, "srq-rxe-server", fmt.Sprintf("ibv_srq_pingpong -d rxe0 -g %d -n %d -q 4 -c", h.gidx, iters),
			append(h.goroceArgs("srq", hostIP, guestIP), "-q", "4"), false)
		h.checkQPs(t, r, 4)
		h.check(t, r, 4096)
	})
	t.Run("srq/goroce-server", func(t *testing.T) {
		r := h.pair(t, "srq-goroce-server", fmt.Sprintf("ibv_srq_pingpong -d rxe0 -g %d -n %d %s", h.gidx, iters, hostIP),
			append(h.goroceArgs("srq", hostIP, ""), "-c"), true)
		h.checkQPs(t, r, 16)
		h.check(t, r, 4096)
	})
	// The same over AF_XDP on the host side (its bridge: generic XDP). The
	// frames AF_XDP sends bypass the bridge's packet taps, so these
	// captures are taken on the guest's tap port, which sees both ways.
	for _, c := range []struct {
		mode       string
		size       int64
		goroceServ bool
	}{{"rc", 4096, false}, {"rc", 4096, true}, {"ud", 1024, false}, {"ud", 1024, true}} {
		label := c.mode + "-afxdp-rxe-server"
		gcmd := fmt.Sprintf("ibv_%s_pingpong -d rxe0 -g %d -n %d", c.mode, h.gidx, iters)
		server := guestIP
		if c.goroceServ {
			label, gcmd, server = c.mode+"-afxdp-goroce-server", gcmd+" "+hostIP, ""
		}
		t.Run(c.mode+"/afxdp/"+strings.TrimPrefix(label, c.mode+"-afxdp-"), func(t *testing.T) {
			args := h.goroceArgs(c.mode, hostIP, server)
			for i, a := range args {
				if a == "udp" && args[i-1] == "--path" {
					args[i] = "afxdp"
				}
			}
			h.captureIf = h.guestTap(t)
			defer func() { h.captureIf = "" }()
			r := h.pair(t, label, gcmd, args, c.goroceServ)
			if !strings.Contains(r.hostOut, "packet path: afxdp") {
				t.Errorf("goroce does not say it runs over AF_XDP:\n%s", r.hostOut)
			}
			h.check(t, r, c.size)
		})
	}
}

// checkQPs checks that both sides of an srq_pingpong run printed n QPs'
// addresses and that the capture carries traffic of all n: a SEND from
// each of the goroce side's QPs.
func (h *harness) checkQPs(t *testing.T, r result, n int) {
	t.Helper()
	for side, out := range map[string]string{"guest": r.guestOut, "goroce": r.hostOut} {
		if l, rm := strings.Count(out, "  local address:"), strings.Count(out, "  remote address:"); l != n || rm != n {
			t.Errorf("%s printed %d local and %d remote addresses, want %d of each", side, l, rm, n)
		}
		if strings.Contains(out, "invalid data") {
			t.Errorf("%s: %s", side, out)
		}
	}
	out, err := exec.Command(h.bin, "decode", "--summary", "--pmtu", "1024", r.pcap).CombinedOutput()
	if err != nil {
		t.Fatalf("goroce decode: %v\n%s", err, out)
	}
	flows := 0
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[0] == guestIP && f[1] == hostIP {
			if m, _ := strconv.Atoi(f[4]); m > 0 {
				flows++ // a QP of goroce's that messages went to
			}
		}
	}
	if flows != n {
		t.Errorf("messages to %d of goroce's QPs, want %d:\n%s", flows, n, out)
	}
}

// guestTap returns the name of the guest's tap port on the harness's bridge.
func (h *harness) guestTap(t *testing.T) string {
	out, err := exec.Command("ip", "-n", h.ns, "-o", "link", "show", "master", "br0").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show master br0: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			return strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")
		}
	}
	t.Fatalf("no port on br0:\n%s", out)
	return ""
}

// guest is one rxe-vm guest kept up by run-peer.sh -k, with its namespace,
// build directory and goroce binary. The package's tests share it: the first
// test that needs a guest boots it, the next ones find it up, and TestMain
// stops it when the tests are done. Booting takes about 40 s under
// emulation, which each test paid when each booted its own.
type guest struct {
	dir    string // the harness directory
	src    string // the build directory the kernel and initrd come from
	tmp    string // this guest's own files, removed when it stops
	build  string // a private build directory (links to the kernel and initrd)
	ns     string // the harness's namespace, unique to this process
	bin    string // the goroce binary
	wcheck string // check-pcap.sh, or ""
	gidx   int    // rxe0's IPv4-mapped GID index

	peer     *exec.Cmd
	peerIn   io.WriteCloser
	peerOut  *testenv.Buffer
	peerDone chan struct{}
	peerErr  error
	kept     bool
	bootErr  string // why the boot failed: the tests after the first fail with it at once
}

// shared is the package's guest, or nil.
var shared *guest

// TestMain stops the shared guest after the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared != nil {
		shared.stop(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	}
	os.Exit(code)
}

// harness is one test's handle on the shared guest.
type harness struct {
	t *testing.T
	*guest
	first     *result // the pair startPeer ran, for peerResult
	captureIf string  // the interface pair captures on (default br0)
}

func newHarness(t *testing.T) *harness {
	return newHarnessBuild(t, os.Getenv("RXE_VM_BUILD"))
}

// newHarnessBuild is newHarness with the guest's kernel and initrd from the
// build directory src (the harness's own build/ when empty). A guest of
// another build that is up is stopped first: one guest runs at a time.
func newHarnessBuild(t *testing.T, src string) *harness {
	dir := os.Getenv("GOROCE_RXE_VM")
	if dir == "" {
		testenv.Skip(t, testenv.RxeVM, "set GOROCE_RXE_VM to the rxe-vm harness directory (and RXE_VM_BUILD to its build directory) to run goroce against Linux rdma_rxe in a qemu guest")
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.RxeVM, "the rxe-vm harness needs root (network namespaces, tap devices)")
	}
	for _, tool := range []string{"qemu-system-x86_64", "tcpdump", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skipf(t, testenv.RxeVM, "the rxe-vm harness needs %s (run its build.sh)", tool)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "run-peer.sh")); err != nil {
		t.Fatalf("GOROCE_RXE_VM=%s: %v", dir, err)
	}
	if src == "" {
		src = filepath.Join(dir, "build")
	}
	if src, err = filepath.Abs(src); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinuz", "initrd.cpio"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			testenv.Skipf(t, testenv.RxeVM, "the rxe-vm harness is not built in %s (run build.sh, or set RXE_VM_BUILD): %v", src, err)
		}
	}
	if shared != nil && shared.src != src {
		shared.stop(t.Logf)
		shared = nil
	}
	if shared == nil {
		g, err := newGuest(dir, src)
		if err != nil {
			t.Fatal(err)
		}
		shared = g
	}
	h := &harness{t: t, guest: shared}
	h.waitIdle(t)
	return h
}

// newGuest makes a guest's build directory and goroce binary; startPeer
// boots it.
func newGuest(dir, src string) (*guest, error) {
	tmp, err := os.MkdirTemp("", "rxeinterop-")
	if err != nil {
		return nil, err
	}
	g := &guest{dir: dir, src: src, tmp: tmp, build: filepath.Join(tmp, "build"), ns: fmt.Sprintf("rxevm-goroce%d", os.Getpid()),
		bin: filepath.Join(tmp, "goroce"), wcheck: os.Getenv("GOROCE_WIRE_CHECK"), gidx: 1}
	// A build directory of our own, so that neither the guest's share nor
	// the captures collide with another user of the harness; the kernel and
	// initrd are the shared build's.
	err = os.MkdirAll(g.build, 0o755)
	for _, f := range []string{"vmlinuz", "initrd.cpio"} {
		if err == nil {
			err = os.Symlink(filepath.Join(src, f), filepath.Join(g.build, f))
		}
	}
	if err == nil {
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if out, berr := exec.Command(gobin, "build", "-o", g.bin, "github.com/goroce/goroce/cmd/goroce").CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build: %v\n%s", berr, out)
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return g, nil
}

// waitIdle waits until no job of an earlier test runs in the guest (a
// failed test can leave its server waiting out its timeout, holding its
// port).
func (h *harness) waitIdle(t *testing.T) {
	if !h.kept {
		return
	}
	jobs := filepath.Join(h.share(), "jobs")
	for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		running, _ := filepath.Glob(filepath.Join(jobs, "*.run"))
		busy := running[:0]
		for _, r := range running {
			if _, err := os.Stat(strings.TrimSuffix(r, ".run") + ".rc"); err != nil {
				busy = append(busy, filepath.Base(r))
			}
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("guest jobs of an earlier test still run after 150 s: %v", busy)
		}
	}
}

// goroceArgs is the goroce pingpong command line; a client when server is
// set. The soft device uses the UDP packet path: the capture on the bridge
// sees only packets that pass through the kernel's stack, not AF_XDP's
// (which --path auto may pick).
func (h *harness) goroceArgs(mode, local, server string) []string {
	a := []string{h.bin, "pingpong", mode, "--addr", local, "--path", "udp", "-n", strconv.Itoa(iters), "--timeout", "100s"}
	if server != "" {
		a = append(a, server)
	}
	return a
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// startPeer boots the shared guest if it is not up (run-peer.sh -k), then
// runs the test's first pair (guest server, host client), as run-peer.sh
// would, for peerResult. A first pair of "true" and "true" is none.
func (h *harness) startPeer(label, guestCmd, hostCmd string) {
	t := h.t
	if h.bootErr != "" {
		t.Fatalf("the shared guest did not boot for an earlier test: %s", h.bootErr)
	}
	if !h.kept {
		if err := h.boot(t); err != nil {
			h.bootErr = err.Error()
			t.Fatal(err)
		}
	}
	if guestCmd == "true" && hostCmd == "true" {
		return
	}
	r := h.firstPair(t, label, guestCmd, hostCmd)
	h.first = &r
}

// boot starts run-peer.sh -k with no pair and waits until the guest is kept
// up.
func (g *guest) boot(t *testing.T) error {
	g.peer = exec.Command(filepath.Join(g.dir, "run-peer.sh"), "-k", "-t", "60", "-l", "boot", "true", "true")
	g.peer.Env = append(os.Environ(), "RXE_VM_BUILD="+g.build, "NS="+g.ns)
	g.peerOut = &testenv.Buffer{}
	g.peer.Stdout, g.peer.Stderr = g.peerOut, g.peerOut
	var err error
	if g.peerIn, err = g.peer.StdinPipe(); err != nil {
		return err
	}
	t.Logf("booting the rxe guest (run-peer.sh -k, namespace %s), which the package's tests share: this takes a while under emulation", g.ns)
	t0 := time.Now()
	if err := g.peer.Start(); err != nil {
		return err
	}
	g.peerDone = make(chan struct{})
	go func() {
		g.peerErr = g.peer.Wait()
		close(g.peerDone)
	}()
	deadline := time.After(8 * time.Minute)
	for !strings.Contains(g.peerOut.String(), "keeping guest up") {
		select {
		case <-g.peerDone:
			return fmt.Errorf("run-peer.sh ended (%v) before keeping the guest up:\n%s", g.peerErr, g.peerOut.String())
		case <-deadline:
			return fmt.Errorf("the guest is not up after 8 minutes:\n%s", g.peerOut.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	g.kept = true
	t.Logf("guest up after %.0f s", time.Since(t0).Seconds())
	// The GID index of ::ffff:10.99.0.2 (the harness finds it the same way).
	bi, err := os.ReadFile(filepath.Join(g.share(), "boot-info.txt"))
	if err != nil {
		return err
	}
	if m := regexp.MustCompile(`(?m)^gid\[(\d+)\]=0000:0000:0000:0000:0000:ffff:`).FindSubmatch(bi); m == nil {
		return fmt.Errorf("rxe0 has no IPv4-mapped GID:\n%s", bi)
	} else if i, _ := strconv.Atoi(string(m[1])); i != g.gidx {
		return fmt.Errorf("rxe0's IPv4-mapped GID has index %d, not %d as the runs assume:\n%s", i, g.gidx, bi)
	}
	return nil
}

// The guest commands run-peer.sh waits for: pingpong and perftest servers
// (rxeServerRE, no address at the end: endsWithAddrRE) on TCP port 18515,
// and rdma_cm servers (cmServerRE: rping, perftest's -R), which open no TCP
// port.
var (
	rxeServerRE    = regexp.MustCompile(`ibv_.*pingpong|ib_.*_bw|ib_.*_lat`)
	endsWithAddrRE = regexp.MustCompile(`([0-9]+\.){3}[0-9]+\s*$`)
	cmServerRE     = regexp.MustCompile(`(^| )(-R|--rdma_cm)( |$)|rping`)
)

// firstPair runs guestCmd in the guest and then hostCmd (a bash command
// line, with run-peer.sh's RXE_* variables) in the namespace, as
// run-peer.sh runs its pair: after a pingpong or perftest server listens on
// TCP 18515 or an rdma_cm server on its port (waitCMListen), 1 s after
// that or anything else; with a capture on the bridge.
func (h *harness) firstPair(t *testing.T, label, guestCmd, hostCmd string) result {
	r := result{guestCmd: guestCmd, hostCmd: hostCmd, pcap: filepath.Join(h.build, "captures", "peer-"+label+".pcap")}
	stop := h.startCapture(t, r.pcap)
	h.guestJob(t, label, 110, guestCmd)
	delay := time.Second
	switch {
	case cmServerRE.MatchString(guestCmd):
		h.waitCMListen(t, label, guestCmd)
	case rxeServerRE.MatchString(guestCmd) && !endsWithAddrRE.MatchString(guestCmd):
		h.waitListen(t, label)
	}
	time.Sleep(delay)
	cmd := exec.Command("ip", "netns", "exec", h.ns, "timeout", "-k", "5", "110", "bash", "-c", hostCmd)
	cmd.Env = append(os.Environ(), "RXE_NS="+h.ns, "RXE_GUEST_IP="+guestIP, "RXE_HOST_IP="+hostIP, fmt.Sprintf("RXE_GID_INDEX=%d", h.gidx))
	out, err := cmd.CombinedOutput()
	r.hostOut, r.hostErr = string(out), err
	r.guestOut, r.guestRC = h.waitJob(t, label, 140*time.Second)
	stop()
	return r
}

// cmPortRE finds a perftest's or rping's port option.
var cmPortRE = regexp.MustCompile(`(?:^| )(?:-p|--port)[ =](\d+)`)

// waitCMListen waits until an rdma_cm server (rping -s, perftest -R),
// started as guest job label, has a listening rdma_cm id on its port, as
// the guest's rdma tool shows them (an rdma_cm server opens no TCP port
// to wait for). Where the tool shows none within 30 s it waits 3 s more,
// as run-peer.sh does, and says so: a fixed wait alone lost the race under
// CI's load.
func (h *harness) waitCMListen(t *testing.T, label, guestCmd string) {
	port := "18515" // perftest's
	if strings.Contains(guestCmd, "rping") {
		port = "7174"
	}
	if m := cmPortRE.FindStringSubmatch(guestCmd); m != nil {
		port = m[1]
	}
	wait := fmt.Sprintf(`i=0; while [ $i -lt 300 ]; do rdma resource show cm_id 2>/dev/null | grep -q "LISTEN.*:%s " && exit 0; sleep 0.1; i=$((i+1)); done; rdma resource show cm_id; exit 1`, port)
	h.guestJob(t, label+"-cmlisten", 60, wait)
	if out, rc := h.waitJob(t, label+"-cmlisten", 90*time.Second); rc != 0 {
		t.Logf("no listening rdma_cm id on port %s in the guest after 30 s (rdma resource show cm_id: %q): waiting 3 s more", port, out)
		time.Sleep(3 * time.Second)
	}
}

// waitListen waits until the guest listens on the pingpong exchange's TCP
// port, for job label's server.
func (h *harness) waitListen(t *testing.T, label string) {
	listen := fmt.Sprintf(`while ! netstat -ltn 2>/dev/null | grep -q ":%d "; do sleep 0.2; done`, ppPort)
	h.guestJob(t, label+"-listen", 60, listen)
	if _, rc := h.waitJob(t, label+"-listen", 90*time.Second); rc != 0 {
		out, _ := h.waitJob(t, label, time.Second)
		t.Fatalf("the guest server does not listen on %d: %s", ppPort, out)
	}
}

// stop lets run-peer.sh stop the guest and remove its namespace, and removes
// the guest's files.
func (g *guest) stop(logf func(string, ...any)) {
	defer os.RemoveAll(g.tmp)
	if g.peer == nil {
		return
	}
	g.peerIn.Close() // ends its "press Enter" wait
	select {
	case <-g.peerDone:
	case <-time.After(90 * time.Second):
		logf("run-peer.sh (pid %d) still running 90 s after stdin closed: terminating it", g.peer.Process.Pid)
		g.peer.Process.Signal(syscall.SIGTERM) // its trap stops the guest and deletes the namespace
		select {
		case <-g.peerDone:
		case <-time.After(60 * time.Second):
			g.peer.Process.Kill()
		}
	}
	g.peer, g.kept = nil, false
}

func (g *guest) share() string { return filepath.Join(g.build, "vm", "g", "share") }

// result is one pair's outcome.
type result struct {
	guestCmd, hostCmd string
	guestOut, hostOut string
	guestRC           int
	hostErr           error
	pcap              string
}

// peerResult is the outcome of the pair startPeer ran.
func (h *harness) peerResult(t *testing.T) result {
	if h.first == nil {
		t.Fatal("startPeer ran no pair")
	}
	return *h.first
}

// pair runs one pair on the kept guest: guestCmd in the guest and goroce
// (host) in the namespace, the server first, with a capture on the bridge.
func (h *harness) pair(t *testing.T, label, guestCmd string, host []string, hostServer bool) result {
	if !h.kept {
		t.Skip("no guest")
	}
	r := result{guestCmd: guestCmd, hostCmd: strings.Join(host, " "), pcap: filepath.Join(h.build, "captures", "peer-"+label+".pcap")}
	stop := h.startCapture(t, r.pcap)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	hostOut := &testenv.Buffer{}
	hostDone := make(chan error, 1)
	startHost := func() {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns}, host...)...)
		cmd.Stdout, cmd.Stderr = hostOut, hostOut
		if err := cmd.Start(); err != nil {
			hostDone <- err
			return
		}
		go func() { hostDone <- cmd.Wait() }()
	}
	rdmacm := cmServerRE.MatchString(guestCmd)
	if hostServer {
		startHost()
		for !strings.Contains(hostOut.String(), "local address") && // pingpong, once it listens
			!strings.Contains(hostOut.String(), "listening on") && // rping -d
			!strings.Contains(hostOut.String(), "Waiting for client to connect") { // bench
			select {
			case err := <-hostDone:
				t.Fatalf("goroce server ended (%v):\n%s", err, hostOut.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		h.guestJob(t, label, 110, guestCmd)
	} else if rdmacm {
		h.guestJob(t, label, 110, guestCmd)
		h.waitCMListen(t, label, guestCmd)
		startHost()
	} else {
		h.guestJob(t, label, 110, guestCmd)
		h.waitListen(t, label)
		time.Sleep(time.Second) // as run-peer.sh's -d
		startHost()
	}
	r.guestOut, r.guestRC = h.waitJob(t, label, 140*time.Second)
	select {
	case r.hostErr = <-hostDone:
	case <-ctx.Done():
		r.hostErr = ctx.Err()
	}
	r.hostOut = hostOut.String()
	stop()
	return r
}

// guestJob starts cmd in the guest as job name, as the harness's vm_job does.
func (h *harness) guestJob(t *testing.T, name string, timeout int, cmd string) {
	jobs := filepath.Join(h.share(), "jobs")
	for _, ext := range []string{".sh", ".run", ".out", ".out.tmp", ".rc"} {
		os.Remove(filepath.Join(jobs, name+ext))
	}
	script := fmt.Sprintf("exec timeout %d sh -c '%s'\n", timeout, strings.ReplaceAll(cmd, "'", `'\''`))
	tmp := filepath.Join(jobs, name+".tmp")
	if err := os.WriteFile(tmp, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(jobs, name+".sh")); err != nil {
		t.Fatal(err)
	}
}

// waitJob waits for a guest job's exit status and returns its output.
//
// The guest writes the status with "echo $rc > NAME.rc", which creates the
// file before it writes the number; over the shared folder the host can see
// it empty. An empty or unparsable status is not yet a status: read as 0 it
// would pass a failed job, which is why this loop goes on until the number is
// there.
func (h *harness) waitJob(t *testing.T, name string, timeout time.Duration) (string, int) {
	jobs := filepath.Join(h.share(), "jobs")
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(jobs, name+".rc"))
		if rc, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			out, _ := os.ReadFile(filepath.Join(jobs, name+".out"))
			return string(out), rc
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(jobs, name+".out.tmp"))
			return string(out) + fmt.Sprintf("\n(no exit status after %v)", timeout), -1
		}
	}
}

// waitJobSays waits until a running guest job's output holds s (the guest
// writes it to NAME.out.tmp on the shared folder while the job runs, and
// renames it NAME.out when the job ends).
func (h *harness) waitJobSays(t *testing.T, name, s string, timeout time.Duration) {
	jobs := filepath.Join(h.share(), "jobs")
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, ext := range []string{".out.tmp", ".out"} {
			if b, err := os.ReadFile(filepath.Join(jobs, name+ext)); err == nil && strings.Contains(string(b), s) {
				return
			}
		}
	}
	out, _ := os.ReadFile(filepath.Join(jobs, name+".out.tmp"))
	t.Fatalf("guest job %s did not say %q within %v; its output so far:\n%s", name, s, timeout, out)
}

// startCapture runs tcpdump on the namespace's bridge into file, as the
// harness's cap_start; the function returned stops it once the file stops
// growing (cap_stop).
func (h *harness) startCapture(t *testing.T, file string) func() {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	log := &testenv.Buffer{}
	iface := "br0"
	if h.captureIf != "" {
		iface = h.captureIf
	}
	cmd := exec.Command("ip", "netns", "exec", h.ns, "tcpdump", "-i", iface, "-U", "-s", "0", "-B", "16384", "-w", file)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	for i := 0; i < 100 && !strings.Contains(log.String(), "listening"); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		last, stable := int64(-1), 0
		for i := 0; i < 60 && stable < 4; i++ {
			time.Sleep(250 * time.Millisecond)
			var cur int64
			if fi, err := os.Stat(file); err == nil {
				cur = fi.Size()
			}
			if cur == last {
				stable++
			} else {
				stable, last = 0, cur
			}
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// check judges a pair: both exit statuses, both reports, and the capture.
func (h *harness) check(t *testing.T, r result, size int64) {
	t.Logf("guest (rc=%d): %s\n%s", r.guestRC, r.guestCmd, r.guestOut)
	t.Logf("host (%v): %s\n%s", r.hostErr, r.hostCmd, r.hostOut)
	if r.guestRC != 0 || r.hostErr != nil {
		t.Errorf("guest exit %d, host %v", r.guestRC, r.hostErr)
	}
	g, gerr := parseReport(r.guestOut)
	o, oerr := parseReport(r.hostOut)
	if gerr != nil || oerr != nil {
		t.Fatalf("reports: guest: %v; goroce: %v", gerr, oerr)
	}
	for _, x := range []struct {
		name string
		r    report
	}{{"guest", g}, {"goroce", o}} {
		if x.r.bytes != 2*size*iters || x.r.iters != iters {
			t.Errorf("%s reports %d bytes and %d iters, want %d and %d", x.name, x.r.bytes, x.r.iters, 2*size*iters, iters)
		}
	}
	if g.locals != o.remotes || o.locals != g.remotes {
		t.Errorf("the two sides disagree on the addresses: guest local %s remote %s; goroce local %s remote %s", g.locals, g.remotes, o.locals, o.remotes)
	}
	if g.local.gid != "::ffff:"+guestIP || o.local.gid != "::ffff:"+hostIP {
		t.Errorf("GIDs: guest %s, goroce %s; want ::ffff:%s and ::ffff:%s", g.local.gid, o.local.gid, guestIP, hostIP)
	}
	h.checkCapture(t, r.pcap)
}

// keepCapture copies pcap into $GOROCE_RXE_CAPTURES, when set.
func keepCapture(t *testing.T, pcap string) {
	dir := os.Getenv("GOROCE_RXE_CAPTURES")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(pcap)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, filepath.Base(pcap)), b, 0o644)
	}
	if err != nil {
		t.Errorf("keeping the capture: %v", err)
		return
	}
	t.Logf("capture kept as %s", filepath.Join(dir, filepath.Base(pcap)))
}

// checkCapture decodes the capture with goroce decode (every RoCEv2 packet
// well formed, every ICRC right) and, with GOROCE_WIRE_CHECK, has
// check-pcap.sh judge it (path MTU 1024, not strict).
func (h *harness) checkCapture(t *testing.T, pcap string) { h.checkCaptureWire(t, pcap, true) }

// checkCaptureWire is checkCapture, with check-pcap.sh only when wire is
// set: it takes a few milliseconds a packet, too long for the tens of
// thousands of a timed run.
func (h *harness) checkCaptureWire(t *testing.T, pcap string, wire bool) {
	keepCapture(t, pcap)
	out, err := exec.Command(h.bin, "decode", "--summary", "--pmtu", "1024", pcap).CombinedOutput()
	t.Logf("goroce decode --summary %s:\n%s", filepath.Base(pcap), out)
	if err != nil {
		t.Errorf("goroce decode: %v", err)
	}
	if m := regexp.MustCompile(`(\d+) RoCEv2 packets`).FindSubmatch(out); m == nil || string(m[1]) == "0" {
		t.Errorf("no RoCEv2 packets in %s", pcap)
	}
	if h.wcheck == "" || !wire {
		t.Log("capture not checked by check-pcap.sh (GOROCE_WIRE_CHECK not set, or a timed run's)")
		return
	}
	js := pcap + ".json"
	cmd := testenv.WireCheckCommand(t, h.wcheck, "--pmtu", "1024", "--json", js, pcap)
	wout, err := cmd.CombinedOutput()
	tail := lastLines(string(wout), 3)
	var ee *exec.ExitError
	switch {
	case err == nil:
		t.Logf("check-pcap.sh: %s", tail)
		return
	case errors.As(err, &ee) && ee.ExitCode() == 1:
	default:
		t.Errorf("check-pcap.sh: %v:\n%s", err, wout)
		return
	}
	// Exit 1: some packets are bad. Accept only one reason, on packets this
	// machine sent: a UDP checksum that is the pseudo-header sum the kernel
	// leaves for checksum offload (CHECKSUM_PARTIAL), which a capture on the
	// sending side sees before the checksum is filled in.
	artifacts, err := offloadArtifacts(t, pcap, js)
	if err != nil {
		t.Errorf("check-pcap.sh: %v\n%s", err, wout)
		return
	}
	t.Logf("check-pcap.sh: %s (%d packets sent by goroce flagged only for their UDP checksum as captured on the sending side, where checksum offload has not filled it in yet: the pseudo-header sum; rdma_rxe accepted them all)", tail, artifacts)
}

// offloadArtifacts reads check-pcap.sh's JSON results and returns how many
// bad packets are bad only for a UDP checksum that is an offload artifact on
// a packet from hostIP, or for an annex A19 opcode the checker does not know;
// any other bad packet is an error.
func offloadArtifacts(t *testing.T, pcap, js string) (int, error) {
	b, err := os.ReadFile(js)
	if err != nil {
		return 0, err
	}
	var res []struct {
		Frame int      `json:"frame"`
		OK    bool     `json:"ok"`
		Bad   []string `json:"bad"`
		Line  string   `json:"line"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return 0, err
	}
	partial, err := partialChecksums(pcap)
	if err != nil {
		return 0, err
	}
	csumRE := regexp.MustCompile(`^UDP checksum wrong \(0x([0-9a-f]{4})\)$`)
	n := 0
	var errs []string
	for _, r := range res {
		if r.OK {
			continue
		}
		ok := len(r.Bad) > 0
		for _, why := range r.Bad {
			// IBA annex A19's FLUSH (0x1C) and ATOMIC WRITE (0x1D) are
			// newer than the checker, which judges their ICRC all the
			// same (a mismatch is a reason of its own).
			if why == "unknown opcode 0x1c" || why == "unknown opcode 0x1d" {
				continue
			}
			if m := csumRE.FindStringSubmatch(why); m == nil || !partial[r.Frame] {
				ok = false
			}
		}
		if !ok {
			errs = append(errs, r.Line)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%d bad packets:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	return n, nil
}

// partialChecksums returns the frames of pcap that hostIP sent over UDP with
// a checksum equal to the folded, uncomplemented pseudo-header sum: what
// Linux leaves in a CHECKSUM_PARTIAL packet for the device to complete.
func partialChecksums(pcap string) (map[int]bool, error) {
	f, err := os.Open(pcap)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := capture.NewReader(f)
	if err != nil {
		return nil, err
	}
	host := netip.MustParseAddr(hostIP).As4()
	out := map[int]bool{}
	var rec capture.Record
	for {
		if err := rd.Next(&rec); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		d := rec.Data
		if rec.LinkType != capture.LinkEthernet || len(d) < 14+20+8 || binary.BigEndian.Uint16(d[12:]) != 0x0800 {
			continue
		}
		ip := d[14:]
		ihl := int(ip[0]&15) * 4
		if ip[9] != 17 || len(ip) < ihl+8 || [4]byte(ip[12:16]) != host {
			continue
		}
		udp := ip[ihl:]
		sum := uint32(17) + uint32(binary.BigEndian.Uint16(udp[4:]))
		for i := 12; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		if uint32(binary.BigEndian.Uint16(udp[6:])) == sum {
			out[rec.Index] = true
		}
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// report is what a pingpong program printed.
type report struct {
	local, remote addr // the last of each (one QP but with srq_pingpong)
	// Every address line's QPN, PSN and GID in order, space-separated:
	// srq_pingpong prints one a QP.
	locals, remotes string
	bytes, iters    int64
}

type addr struct {
	lid, qpn, psn uint64
	gid           string
}

var (
	addrRE  = regexp.MustCompile(`^  (local|remote) address: +LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	bytesRE = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = \S+ Mbit/sec$`)
	itersRE = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \S+ usec/iter$`)
)

// parseReport parses the report lines of goroce pingpong or ibv_*_pingpong.
func parseReport(out string) (report, error) {
	var r report
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := addrRE.FindStringSubmatch(l); m != nil {
			a := addr{gid: m[5]}
			a.lid, _ = strconv.ParseUint(m[2], 16, 16)
			a.qpn, _ = strconv.ParseUint(m[3], 16, 32)
			a.psn, _ = strconv.ParseUint(m[4], 16, 32)
			all := &r.remotes
			if m[1] == "local" {
				r.local, all = a, &r.locals
			} else {
				r.remote = a
			}
			*all = strings.TrimSpace(fmt.Sprintf("%s %x/%x/%s", *all, a.qpn, a.psn, a.gid))
			seen[m[1]] = true
		} else if m := bytesRE.FindStringSubmatch(l); m != nil {
			r.bytes, _ = strconv.ParseInt(m[1], 10, 64)
			seen["bytes"] = true
		} else if m := itersRE.FindStringSubmatch(l); m != nil {
			r.iters, _ = strconv.ParseInt(m[1], 10, 64)
			seen["iters"] = true
		}
	}
	for _, k := range []string{"local", "remote", "bytes", "iters"} {
		if !seen[k] {
			return r, fmt.Errorf("no %s line in:\n%s", k, out)
		}
	}
	return r, nil
}

func TestParseReport(t *testing.T) {
	r, err := parseReport("  local address:  LID 0x0000, QPN 0x000012, PSN 0x1662f9: GID ::ffff:10.99.0.2\n" +
		"  remote address: LID 0x0000, QPN 0x000011, PSN 0x956c48, GID ::ffff:10.99.0.1\n" +
		"20480 bytes in 0.02 seconds = 8.13 Mbit/sec\n10 iters in 0.02 seconds = 2015.20 usec/iter\n")
	want := report{local: addr{0, 0x12, 0x1662f9, "::ffff:10.99.0.2"}, remote: addr{0, 0x11, 0x956c48, "::ffff:10.99.0.1"},
		locals: "12/1662f9/::ffff:10.99.0.2", remotes: "11/956c48/::ffff:10.99.0.1", bytes: 20480, iters: 10}
	if err != nil || r != want {
		t.Fatalf("parseReport = %+v, %v; want %+v", r, err, want)
	}
	if _, err := parseReport("Failed status transport retry counter exceeded (12) for wr_id 2\n"); err == nil {
		t.Fatal("a failed run parsed")
	}
}
