package preload_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/preload"
)

var (
	libOnce sync.Once
	libDir  string
	libPath string
	libErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if libDir != "" {
		os.RemoveAll(libDir)
	}
	os.Exit(code)
}

// lib builds libgoroce-verbs.so once, in a directory every user can read
// (the programs run as nobody).
func lib(t *testing.T) string {
	t.Helper()
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(h); err != nil {
			testenv.Skipf(t, testenv.CPrograms, "%s is missing (apt-get install libibverbs-dev librdmacm-dev)", h)
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Skip(t, testenv.CPrograms, "no C compiler for cgo")
	}
	libOnce.Do(func() {
		libDir, libErr = os.MkdirTemp("", "goroce-preload-")
		if libErr != nil {
			return
		}
		os.Chmod(libDir, 0o755)
		libPath = filepath.Join(libDir, preload.LibName)
		out, err := exec.Command(goTool(), preload.BuildArgs(libPath)...).CombinedOutput()
		if err != nil {
			libErr = fmt.Errorf("go %v: %v\n%s", preload.BuildArgs(libPath), err, out)
		}
	})
	if libErr != nil {
		t.Fatal(libErr)
	}
	return libPath
}

// need skips t unless Debian's programs are installed.
func need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Skipf(t, testenv.CPrograms, "%s is not installed (apt-get install ibverbs-utils perftest rdmacm-utils)", p)
		}
	}
}

// run runs a program with the library and the devices of o, as the user
// running the test, and returns its output.
func run(t *testing.T, o preload.Options, name string, args ...string) (string, error) {
	t.Helper()
	o.Lib = lib(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = preload.Env(os.Environ(), o)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A device on a loopback address no other test uses (UDP port 4791 is the
// device's).
const loAddr = "127.0.34.1"

func TestDeviceList(t *testing.T) {
	need(t, "ibv_devices", "ibv_devinfo")
	o := preload.Options{Addrs: []string{loAddr}, Path: "udp"}
	out, err := run(t, o, "ibv_devices")
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, out)
	}
	// The node GUID of soft.Device.GUID for the address: its last three bytes.
	if !regexp.MustCompile(`soft0\s+02005efffe002201`).MatchString(out) {
		t.Errorf("ibv_devices does not list soft0 with its GUID:\n%s", out)
	}
	out, err = run(t, o, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, want := range []string{
		`hca_id:\s+soft0`, `node_guid:\s+0200:5eff:fe00:2201`, `state:\s+PORT_ACTIVE \(4\)`,
		`link_layer:\s+Ethernet`, `GID\[\s*1\]:\s+::ffff:127\.0\.34\.1, RoCE v2`, `active_mtu:\s+4096`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("ibv_devinfo -v: no %q in\n%s", want, out)
		}
	}
	o.Names = []string{"gr0", "gr1"}
	o.Addrs = []string{loAddr, "127.0.34.2"}
	out, err = run(t, o, "ibv_devices")
	if err != nil || !strings.Contains(out, "gr0") || !strings.Contains(out, "gr1") {
		t.Errorf("two devices by name: %v\n%s", err, out)
	}
}

// A program run between two namespaces: the server in A, the client in B.
// "ADDR" in the arguments is the server's address.
type program struct {
	name   string
	server []string
	client []string
	want   string   // in the client's output
	cm     bool     // rdma_cm: no TCP listener to wait for
	plain  bool     // not through the library (goroce's own commands); LOCAL is the side's address
	env    []string // more environment; LOCAL is the side's address
	port   int      // the server's TCP port (default 18515, perftest's)
}

// perfLine is a line of perftest's results for 100 iterations.
const perfLine = `(?m)^\s*\d+\s+100\s+\d+\.\d+\s+\d+\.\d+`

func programs() []program {
	pp := func(name string, extra ...string) program {
		a := append([]string{"-g", "1", "-n", "100"}, extra...)
		return program{name: name, server: a, client: append(append([]string{}, a...), "ADDR"), want: `100 iters in`}
	}
	perf := func(name string, cm bool) program {
		a := []string{"-x", "1", "-n", "100"}
		if cm {
			a = append(a, "-R")
		}
		return program{name: name, server: a, client: append(append([]string{}, a...), "ADDR"), want: perfLine, cm: cm}
	}
	ps := []program{pp("ibv_rc_pingpong"), pp("ibv_ud_pingpong", "-s", "512"), pp("ibv_srq_pingpong")}
	for _, cm := range []bool{false, true} {
		for _, n := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_send_lat", "ib_write_lat"} {
			ps = append(ps, perf(n, cm))
		}
	}
	return append(ps, program{name: "rping", server: []string{"-s", "-a", "ADDR", "-C", "10", "-v"}, client: []string{"-c", "-a", "ADDR", "-C", "10", "-v"}, want: `(?m)^ping data: rdma-ping-9: `, cm: true})
}

// TestProgramsNetns runs Debian's unmodified programs between two processes
// on soft devices in a fresh pair of namespaces, as the unprivileged user
// nobody, and checks that both sides succeed and the client reports its
// results.
func TestProgramsNetns(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "setpriv")
	var names []string
	for _, p := range programs() {
		names = append(names, p.name)
	}
	need(t, names...)
	l := lib(t)
	pair := netns.NewPair(t, netns.Options{})
	for _, p := range programs() {
		name := p.name
		if p.cm && p.name != "rping" {
			name += "-R"
		}
		t.Run(name, func(t *testing.T) {
			srv, cli, err := between(t, pair, l, p)
			if err != nil {
				t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv, cli)
			}
			if !regexp.MustCompile(p.want).MatchString(cli) {
				t.Errorf("client output has no %q:\n%s\nserver:\n%s", p.want, cli, srv)
			}
		})
	}
}

// subst puts the server's address (pair.A's) for ADDR and the side's own
// for LOCAL.
func subst(pair *netns.Pair, args []string, local string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(a, "ADDR", pair.AddrA.String()), "LOCAL", local)
	}
	return out
}

// between runs p's server in pair.A and its client in pair.B as nobody.
func between(t *testing.T, pair *netns.Pair, l string, p program) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := func(ns *netns.NS, addr string, args []string) *exec.Cmd {
		// The library goes to the program alone (env after setpriv): in
		// ip and setpriv, which change user IDs, it has no business.
		env := preload.Env(nil, preload.Options{Addrs: []string{addr}, Path: "udp", Lib: l})
		if p.cm {
			env = append(env, "GOROCE_DEBUG=1") // says when it listens
		}
		if p.plain {
			env = nil
		}
		for _, e := range p.env {
			env = append(env, strings.ReplaceAll(e, "LOCAL", addr))
		}
		a := append([]string{"netns", "exec", ns.Name, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "env"}, env...)
		a = append(append(a, p.name), subst(pair, args, addr)...)
		return exec.CommandContext(ctx, "ip", a...)
	}
	var srvOut lockedBuffer
	var cliOut strings.Builder
	srv := cmd(pair.A, pair.AddrA.String(), p.server)
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return "", "", err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	exited := func() bool { return len(done) > 0 }
	port := 18515
	if p.port != 0 {
		port = p.port
	}
	ready := func() error { return waitListen(ctx, pair.A, port, exited) }
	if p.cm {
		ready = func() error { return waitCM(ctx, &srvOut, exited) }
	}
	if err := ready(); err != nil {
		srv.Process.Kill()
		<-done
		return srvOut.String(), "", err
	}
	cli := cmd(pair.B, pair.AddrB.String(), p.client)
	cli.Stdout, cli.Stderr = &cliOut, &cliOut
	cerr := cli.Run()
	serr := <-done
	switch {
	case cerr != nil:
		return srvOut.String(), cliOut.String(), fmt.Errorf("client: %w", cerr)
	case serr != nil:
		return srvOut.String(), cliOut.String(), fmt.Errorf("server: %w", serr)
	}
	return srvOut.String(), cliOut.String(), nil
}

// waitListen waits until a TCP socket of ns listens on port (the programs'
// out-of-band exchange).
func waitListen(ctx context.Context, ns *netns.NS, port int, exited func() bool) error {
	hex := fmt.Sprintf(":%04X 0", port) // then the remote address (of either family) and state 0A
	for {
		out, err := ns.Exec("cat", "/proc/net/tcp", "/proc/net/tcp6")
		if err == nil && regexp.MustCompile(hex+`+:0000 0A`).Match(out) {
			return nil
		}
		if exited() {
			return fmt.Errorf("the server exited before it listened on port %d", port)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on port %d: %w", port, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitCM waits until the rdma_cm server says it listens (the library's
// GOROCE_DEBUG line): a dial before is refused (REJ 8), as Linux's would be.
func waitCM(ctx context.Context, out *lockedBuffer, exited func() bool) error {
	for !strings.Contains(out.String(), "rdma_listen: listening on") {
		if exited() {
			return fmt.Errorf("the server exited before it listened")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server did not listen: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// lockedBuffer is a buffer a command writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
