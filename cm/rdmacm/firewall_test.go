//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
)

// TestDialFirewall: a local firewall (nftables' output hook) that drops
// every CM MAD makes each send fail with EPERM: the dial fails within a
// second with an error that matches ErrUnreachable and EPERM. One that
// drops a fifth of them at random is packet loss: every dial connects, the
// REQ's resends covering the refused sends (before, the first refusal
// failed the dial at once).
func TestDialFirewall(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "nft")
	ns := netns.New(t)
	nft := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "nft"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v\n%s", args, err, out)
		}
	}
	var devA, devB *soft.Device
	err := ns.Do(func() error {
		for _, x := range []struct {
			d    **soft.Device
			addr string
		}{{&devA, "127.0.0.1"}, {&devB, "127.0.0.2"}} {
			c, err := udp.Listen(netip.MustParseAddr(x.addr), udp.Options{})
			if err != nil {
				return err
			}
			if *x.d, err = soft.New(soft.Options{Conn: c}); err != nil {
				c.Close()
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer devA.Close()
	defer devB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7174")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accept every request, each on its own: Accept waits for the RTU
		for {
			req, err := l.Accept(ctx)
			if err != nil {
				return
			}
			// Accepting in turn, a connection whose RTU was lost (its REP
			// resent 6.4 s later, and perhaps lost again) held the next
			// request past the MRA timeout (17.2 s), which rejected it with
			// REJ 4 (timeout): a dial failed once in about 15 runs.
			go func() {
				s := newSideNoCleanup(devB)
				if _, err := req.Accept(ctx, s.qp, rdmacm.AcceptOptions{}); err != nil {
					s.close()
				}
			}()
		}
	}()
	var conns []*rdmacm.Conn
	defer func() {
		exec.Command("ip", "netns", "exec", ns.Name, "nft", "flush", "table", "inet", "goroce_fw").Run()
		for _, c := range conns {
			c.Close() // without loss: a DREQ lost would wait for its resends
		}
	}()
	dial := func() (time.Duration, error) {
		a := newSide(t, devA)
		var d time.Duration
		err := ns.Do(func() error { // the probe's socket is the namespace's
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			c, err := rdmacm.Dial(dctx, devA, "127.0.0.2:7174", a.qp, rdmacm.DialOptions{})
			d = time.Since(start)
			if c != nil {
				conns = append(conns, c)
			}
			return err
		})
		return d, err
	}
	nft("add", "table", "inet", "goroce_fw")
	defer exec.Command("ip", "netns", "exec", ns.Name, "nft", "delete", "table", "inet", "goroce_fw").Run()
	nft("add", "chain", "inet", "goroce_fw", "out", "{ type filter hook output priority 0; }")

	nft("add", "rule", "inet", "goroce_fw", "out", "udp", "dport", "4791", "@th,64,8", "0x64", "drop")
	d, err := dial()
	var pe *rdmacm.PathError
	if !errors.As(err, &pe) || !errors.Is(err, rdmacm.ErrUnreachable) || !errors.Is(err, syscall.EPERM) {
		t.Fatalf("dial through a firewall dropping every MAD: %v", err)
	}
	if d > time.Second {
		t.Errorf("failed after %v, want within 1 s", d)
	}
	t.Logf("every MAD dropped: %v after %v", err, d)

	nft("flush", "chain", "inet", "goroce_fw", "out")
	nft("add", "rule", "inet", "goroce_fw", "out", "udp", "dport", "4791", "@th,64,8", "0x64", "numgen", "random", "mod", "5", "==", "0", "counter", "drop")
	var took []time.Duration
	for i := range 4 {
		d, err := dial()
		if err != nil {
			t.Fatalf("dial %d with a fifth of the MADs dropped: %v after %v (before: %v)", i, err, d, took)
		}
		took = append(took, d)
	}
	out, _ := exec.Command("ip", "netns", "exec", ns.Name, "nft", "list", "chain", "inet", "goroce_fw", "out").CombinedOutput()
	t.Logf("a fifth dropped: 4 dials connected in %v; %s", took, fmt.Sprint(string(out)))
}
