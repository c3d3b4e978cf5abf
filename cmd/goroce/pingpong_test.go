package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/goroce/goroce/internal/netns"
)

// ppReport is what a pingpong run printed.
type ppReport struct {
	local, remote ppAddr
	bytes, iters  int64
	secs          float64
}

type ppAddr struct {
	lid, qpn, psn uint64
	gid           string
}

var (
	ppAddrRE  = regexp.MustCompile(`^  (local|remote) address: +LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	ppBytesRE = regexp.MustCompile(`^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d|[+-]?[Ii]nf) Mbit/sec$`)
	ppItersRE = regexp.MustCompile(`^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d) usec/iter$`)
)

// parsePPReport parses the report lines of goroce pingpong or rdma-core's
// ibv_*_pingpong in out (other lines are ignored).
func parsePPReport(out string) (ppReport, error) {
	var r ppReport
	var seen [4]bool
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := ppAddrRE.FindStringSubmatch(l); m != nil {
			a := ppAddr{gid: m[5]}
			a.lid, _ = strconv.ParseUint(m[2], 16, 16)
			a.qpn, _ = strconv.ParseUint(m[3], 16, 32)
			a.psn, _ = strconv.ParseUint(m[4], 16, 32)
			if m[1] == "local" {
				r.local, seen[0] = a, true
			} else {
				r.remote, seen[1] = a, true
			}
		} else if m := ppBytesRE.FindStringSubmatch(l); m != nil {
			r.bytes, _ = strconv.ParseInt(m[1], 10, 64)
			r.secs, _ = strconv.ParseFloat(m[2], 64)
			seen[2] = true
		} else if m := ppItersRE.FindStringSubmatch(l); m != nil {
			r.iters, _ = strconv.ParseInt(m[1], 10, 64)
			seen[3] = true
		}
	}
	for i, what := range []string{"local address", "remote address", "bytes", "iters"} {
		if !seen[i] {
			return r, fmt.Errorf("no %q line in:\n%s", what, out)
		}
	}
	return r, nil
}

// checkPPPair checks the reports of a server and a client that ran size
// bytes n times with each other.
func checkPPPair(t *testing.T, server, client string, size, n int64) {
	t.Helper()
	s, err := parsePPReport(server)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	c, err := parsePPReport(client)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	for _, r := range []struct {
		name string
		r    ppReport
	}{{"server", s}, {"client", c}} {
		if r.r.bytes != 2*size*n || r.r.iters != n {
			t.Errorf("%s: %d bytes, %d iters; want %d bytes, %d iters", r.name, r.r.bytes, r.r.iters, 2*size*n, n)
		}
	}
	if s.local != c.remote || c.local != s.remote {
		t.Errorf("addresses do not match: server local %+v remote %+v; client local %+v remote %+v", s.local, s.remote, c.local, c.remote)
	}
}

func TestParsePPReport(t *testing.T) {
	// As ibv_rc_pingpong prints it (rdma-core 44 on rdma_rxe).
	out := "  local address:  LID 0x0000, QPN 0x000011, PSN 0x5e3f2a, GID ::ffff:10.99.0.2\n" +
		"  remote address: LID 0x0000, QPN 0x000012, PSN 0x0b1c2d, GID ::ffff:10.99.0.1\n" +
		"8192000 bytes in 0.02 seconds = 3276.80 Mbit/sec\n" +
		"1000 iters in 0.02 seconds = 20.00 usec/iter\n"
	r, err := parsePPReport(out)
	if err != nil {
		t.Fatal(err)
	}
	want := ppReport{local: ppAddr{0, 0x11, 0x5e3f2a, "::ffff:10.99.0.2"}, remote: ppAddr{0, 0x12, 0x0b1c2d, "::ffff:10.99.0.1"},
		bytes: 8192000, iters: 1000, secs: 0.02}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	// ibv_ud_pingpong's local line has "PSN 0x...: GID".
	if _, err := parsePPReport(strings.Replace(out, "PSN 0x5e3f2a, GID", "PSN 0x5e3f2a: GID", 1)); err != nil {
		t.Error(err)
	}
	if _, err := parsePPReport("8192000 bytes in 0.02 seconds = 3276.80 Mbit/sec\n"); err == nil {
		t.Error("incomplete report accepted")
	}
}

func TestPingpongUsage(t *testing.T) {
	for _, args := range [][]string{
		{"pingpong"}, {"pingpong", "xx"}, {"pingpong", "rc", "-m", "1000"}, {"pingpong", "rc", "a", "b"},
		{"pingpong", "ud", "-m", "1024"}, {"pingpong", "rc", "-n", "0"}, {"pingpong", "rc", "--bogus"},
	} {
		var o, e bytes.Buffer
		if code := run(args, &o, &e); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %s)", args, code, e.String())
		}
	}
	var o, e bytes.Buffer
	if code := run([]string{"pingpong", "rc", "-h"}, &o, &e); code != 0 || !strings.Contains(e.String(), "-rx-depth") {
		t.Errorf("-h: exit %d, %s", code, e.String())
	}
	if code := run([]string{"pingpong", "rc", "-o", "--addr", "127.0.0.1"}, &o, &e); code != 1 {
		t.Errorf("-o: exit %d", code)
	}
}

// freePort returns a TCP port nothing listens on (now).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPingpongLoopback runs both sides in this process, on two loopback
// addresses (needs no privilege).
func TestPingpongLoopback(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		size int64
		n    int64
	}{
		{"rc", []string{"rc", "-n", "50"}, 4096, 50},
		{"rc-events-small", []string{"rc", "-e", "-s", "100", "-n", "50", "-r", "3"}, 100, 50},
		{"ud", []string{"ud", "-n", "50", "-s", "512"}, 512, 50},
		{"ud-events", []string{"ud", "-e", "-n", "50", "-c"}, 1024, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			common := append(append([]string{"pingpong"}, c.args...), "-p", port, "--timeout", "20s")
			server := &testenv.Buffer{}
			var serr bytes.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run(append(common, "--addr", "127.0.91.1"), server, &serr)
			}()
			waitFor(t, server, "local address") // printed once the server listens
			var cout, cerr bytes.Buffer
			if code := run(append(common, "--addr", "127.0.91.2", "127.0.0.1"), &cout, &cerr); code != 0 {
				t.Fatalf("client exit %d: %s%s", code, cout.String(), cerr.String())
			}
			if code := <-done; code != 0 {
				t.Fatalf("server exit %d: %s%s", code, server.String(), serr.String())
			}
			checkPPPair(t, server.String(), cout.String(), c.size, c.n)
			t.Logf("client:\n%s", cout.String())
		})
	}
}

// waitFor waits until out holds what.
func waitFor(t *testing.T, out *testenv.Buffer, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), what); {
		if time.Now().After(deadline) {
			t.Fatalf("no %q after 10 s: %s", what, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPingpongHelperProcess is not a test: it runs goroce's command line
// when started by the namespace tests as a child process.
func TestPingpongHelperProcess(t *testing.T) {
	if os.Getenv("GOROCE_PINGPONG_HELPER") != "1" {
		t.Skip("helper process for the namespace tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

// startIn starts goroce (this test binary as a helper process) with args in
// namespace ns; its output goes to out. The first channel is closed when it
// prints its "local address" line (or ends), the second receives its exit.
func startIn(t *testing.T, ctx context.Context, ns *netns.NS, out *testenv.Buffer, args ...string) (<-chan struct{}, <-chan error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, os.Args[0], "-test.run=^TestPingpongHelperProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "GOROCE_PINGPONG_HELPER=1")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = out
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			if !once && strings.Contains(sc.Text(), "local address") {
				once = true
				close(ready)
			}
		}
		if !once {
			close(ready)
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exit := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exit <- err
	}()
	return ready, exit
}

// TestPingpongNetns runs goroce pingpong rc and ud between two network
// namespaces joined by a veth pair, each side a separate process, as two
// machines would.
func TestPingpongNetns(t *testing.T) {
	netns.Require(t)
	if testing.Short() {
		t.Skip("-short")
	}
	pair := netns.NewPair(t, netns.Options{})
	for _, c := range []struct {
		name string
		args []string
		size int64
		n    int64
	}{
		{"rc", []string{"rc", "-n", "300"}, 4096, 300},
		{"rc-mtu256-events", []string{"rc", "-m", "256", "-s", "3000", "-e", "-n", "100"}, 3000, 100},
		{"ud", []string{"ud", "-n", "300"}, 1024, 300},
		{"ud-events-small", []string{"ud", "-s", "32", "-e", "-n", "100", "-r", "10"}, 32, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append(append([]string{"pingpong"}, c.args...), "--timeout", "40s")
			sout, cout := &testenv.Buffer{}, &testenv.Buffer{}
			ready, sexit := startIn(t, ctx, pair.A, sout, append(args, "--addr", pair.AddrA.String())...)
			select {
			case <-ready:
			case <-ctx.Done():
				t.Fatal("server did not start")
			}
			_, cexit := startIn(t, ctx, pair.B, cout, append(args, "--addr", pair.AddrB.String(), pair.AddrA.String())...)
			cerr, serr := <-cexit, <-sexit
			if cerr != nil || serr != nil {
				t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sout.String(), cerr, cout.String())
			}
			checkPPPair(t, sout.String(), cout.String(), c.size, c.n)
			s, _ := parsePPReport(sout.String())
			if s.local.gid != "::ffff:"+pair.AddrA.String() || s.remote.gid != "::ffff:"+pair.AddrB.String() {
				t.Errorf("GIDs %s, %s; want the IPv4-mapped addresses of %v and %v", s.local.gid, s.remote.gid, pair.AddrA, pair.AddrB)
			}
			t.Logf("server:\n%sclient:\n%s", sout.String(), cout.String())
		})
	}
}

// TestPingpongPcap runs an RC pingpong whose client records with --pcap,
// and decodes the capture: both directions are there (requests out, ACKs and
// the server's sends in) and every packet's ICRC checks out, incoming ones
// included.
func TestPingpongPcap(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	pcap := filepath.Join(t.TempDir(), "client.pcap")
	common := []string{"pingpong", "rc", "-n", "20", "-s", "2000", "-p", port, "--timeout", "20s", "--path", "udp"}
	server := &testenv.Buffer{}
	var serr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(append(common, "--addr", "127.0.91.3"), server, &serr) }()
	waitFor(t, server, "local address")
	var cout, cerr bytes.Buffer
	if code := run(append(common, "--addr", "127.0.91.4", "--pcap", pcap, "127.0.0.1"), &cout, &cerr); code != 0 {
		t.Fatalf("client exit %d: %s%s", code, cout.String(), cerr.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("server exit %d: %s%s", code, server.String(), serr.String())
	}
	var dout, derr bytes.Buffer
	if code := run([]string{"decode", pcap}, &dout, &derr); code != 0 {
		t.Fatalf("decode of the client's capture: exit %d\n%s%s", code, dout.String(), derr.String())
	}
	out := dout.String()
	from, to := strings.Count(out, "127.0.91.4:4791 > 127.0.91.3"), strings.Count(out, "127.0.91.3:4791 > 127.0.91.4")
	if from < 20 || to < 20 {
		t.Errorf("capture has %d packets from the client and %d to it; want at least 20 of each (the sends of both sides)\n%s", from, to, out)
	}
}
