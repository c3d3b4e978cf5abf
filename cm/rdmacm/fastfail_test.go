//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
)

// TestRefusedByDeviceWithoutManager: a dial to a device that never called
// Listen (no connection manager runs on it) is refused with REJ 8 within
// 50 ms, as Linux's ib_cm refuses it, and the device is left as it was.
func TestRefusedByDeviceWithoutManager(t *testing.T) {
	devA, devB := newDev(t, "127.0.21.1"), newDev(t, "127.0.21.2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		a := newSide(t, devA)
		start := time.Now()
		_, err := rdmacm.Dial(ctx, devA, "127.0.21.2:7174", a.qp, rdmacm.DialOptions{})
		d := time.Since(start)
		var rej *rdmacm.RejectError
		if !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID || !errors.Is(err, rdmacm.ErrRefused) {
			t.Fatalf("dial %d: %v, want REJ reason 8", i, err)
		}
		if d > 50*time.Millisecond {
			t.Fatalf("dial %d refused after %v, want within 50 ms", i, d)
		}
		t.Logf("dial %d: %v after %v", i, err, d)
	}
	if s := devB.GSIStats(); s.TxMADs != 5 || s.RxMADs != 5 {
		t.Errorf("the device without a manager: %+v, want 5 REQs in, 5 REJs out", s)
	}
}

// TestDialNoDevice: a dial to a host with no RoCE device (nothing on UDP
// port 4791: ICMP port unreachable comes back) fails within 1 s with an
// error that says so and matches ErrUnreachable and ECONNREFUSED.
func TestDialNoDevice(t *testing.T) {
	devA := newDev(t, "127.0.21.3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := newSide(t, devA)
	start := time.Now()
	_, err := rdmacm.Dial(ctx, devA, "127.0.21.4:7174", a.qp, rdmacm.DialOptions{})
	d := time.Since(start)
	var pe *rdmacm.PathError
	if !errors.Is(err, rdmacm.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &pe) ||
		!pe.ICMP || !strings.Contains(err.Error(), "port unreachable") {
		t.Fatalf("dial to a host with no device: %v", err)
	}
	if d > time.Second || d < rdmacm.UnreachableGrace {
		t.Fatalf("failed after %v, want between %v and 1 s", d, rdmacm.UnreachableGrace)
	}
	t.Logf("%v after %v", err, d)
	if s := rdmacm.Attach(devA, rdmacm.MachineConfig{}).Stats(); s.Conns != 0 {
		t.Errorf("%d connections left", s.Conns)
	}
}

// TestDialNoRoute: a dial to a network with no route (a namespace with
// loopback only) fails at once with ENETUNREACH.
func TestDialNoRoute(t *testing.T) {
	netns.Require(t)
	ns := netns.New(t)
	var dev *soft.Device
	err := ns.Do(func() error {
		c, err := udp.Listen(netip.MustParseAddr("127.0.0.1"), udp.Options{})
		if err != nil {
			return err
		}
		if dev, err = soft.New(soft.Options{Conn: c}); err != nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a := newSide(t, dev)
	var d time.Duration
	err = ns.Do(func() error { // where the program runs: the probe's socket is the namespace's
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := rdmacm.Dial(ctx, dev, "10.99.99.99:7174", a.qp, rdmacm.DialOptions{})
		d = time.Since(start)
		return err
	})
	if !errors.Is(err, rdmacm.ErrUnreachable) || !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("dial with no route: %v", err)
	}
	if d > 100*time.Millisecond {
		t.Fatalf("failed after %v, want at once", d)
	}
	t.Logf("%v after %v", err, d)
}

// TestDialBeforeListener: a server whose device and listener come up 300
// ms after the dial is found by the REQ's quick resends, without Linux's
// 6.4 s stall: 100 dials (5 at a time), none over 1 s, each connected
// within 300 ms of its server's listener. A server that, on a machine too
// busy, bound its socket only after UnreachableGrace was absent that long:
// its dial may end in an ICMP error, as it should, and its run does not
// count; the test skips when fewer than half the runs count.
func TestDialBeforeListener(t *testing.T) {
	const lanes, rounds = 5, 20
	var mu sync.Mutex
	var worst, worstAfter time.Duration
	counted, late := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, lanes*rounds)
	for lane := 0; lane < lanes; lane++ {
		cli := newDev(t, fmt.Sprintf("127.0.23.%d", lane+1))
		srvAddr := fmt.Sprintf("127.0.24.%d", lane+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				run, err := dialBeforeListener(t, cli, srvAddr, 7300+r)
				mu.Lock()
				switch {
				case run.bound > rdmacm.UnreachableGrace:
					late++
				case err != nil:
					errs <- fmt.Errorf("lane %d round %d (server bound at %v, listening at %v): %w", lane, r, run.bound, run.listening, err)
				default:
					counted++
					worst, worstAfter = max(worst, run.dial), max(worstAfter, run.dial-run.listening)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d dials counted (%d servers up too late), the slowest connected after %v, at most %v after its listener",
		counted, late, worst, worstAfter)
	if counted < lanes*rounds/2 {
		t.Skipf("the machine is too busy: %d of %d servers took longer than %v to bind their socket", late, lanes*rounds, rdmacm.UnreachableGrace)
	}
	if worst > time.Second || worstAfter > 300*time.Millisecond {
		t.Errorf("a dial took %v (%v after its listener), want none over 1 s (300 ms)", worst, worstAfter)
	}
}

// dialRun is one dial of TestDialBeforeListener: how long it took, and when
// its server's socket was bound and its listener listening, from the dial's
// start.
type dialRun struct{ dial, bound, listening time.Duration }

func dialBeforeListener(t *testing.T, cli *soft.Device, srvAddr string, port int) (dialRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var run dialRun
	srvErr := make(chan error, 1)
	start := time.Now()
	serve := func() error { // as a server process would, 300 ms late
		time.Sleep(300 * time.Millisecond)
		c, err := udp.Listen(netip.MustParseAddr(srvAddr), udp.Options{})
		run.bound = time.Since(start)
		if err != nil {
			return err
		}
		srv, err := soft.New(soft.Options{Conn: c})
		if err != nil {
			c.Close()
			return err
		}
		defer srv.Close()
		l, err := rdmacm.Listen(ctx, srv, fmt.Sprintf(":%d", port))
		run.listening = time.Since(start)
		if err != nil {
			return err
		}
		defer l.Close()
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		s := newSideNoCleanup(srv)
		defer s.close()
		conn, err := req.Accept(ctx, s.qp, rdmacm.AcceptOptions{})
		if err == nil {
			<-conn.Done() // the dialer closes
		}
		return err
	}
	a := newSideNoCleanup(cli)
	defer a.close()
	go func() { srvErr <- serve() }()
	conn, err := rdmacm.Dial(ctx, cli, fmt.Sprintf("%s:%d", srvAddr, port), a.qp, rdmacm.DialOptions{})
	run.dial = time.Since(start)
	if err != nil {
		cancel()
		<-srvErr // run's times are the server's: read them after it ends
		return run, err
	}
	conn.Close()
	err = <-srvErr
	return run, err
}
