package probe_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/probe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Loopback addresses of this package's soft devices (other test packages
// use other 127.0.x.y).
var (
	addrA = netip.MustParseAddr("127.0.44.1")
	addrB = netip.MustParseAddr("127.0.44.2")
	addrC = netip.MustParseAddr("127.0.44.3")
)

// softContext opens a soft device on a UDP socket bound to a (port 4791),
// closed at the end of the test.
func softContext(t testing.TB, a netip.Addr) (*soft.Device, verbs.Context) {
	t.Helper()
	c, err := udp.Listen(a, udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", a, err)
	}
	d, err := soft.New(soft.Options{Name: "probe" + a.String(), Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	ctx, err := d.Open()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close(); d.Close() })
	return d, ctx
}

// collector gathers a prober's results.
type collector struct {
	mu  sync.Mutex
	rs  []probe.Result
	sig chan struct{}
}

func newCollector() *collector { return &collector{sig: make(chan struct{}, 1)} }

func (c *collector) add(r probe.Result) {
	c.mu.Lock()
	c.rs = append(c.rs, r)
	c.mu.Unlock()
	select {
	case c.sig <- struct{}{}:
	default:
	}
}

// wait waits up to d until pred holds for the results so far, and returns
// a copy of them.
func (c *collector) wait(t testing.TB, d time.Duration, pred func([]probe.Result) bool) []probe.Result {
	t.Helper()
	deadline := time.After(d)
	for {
		c.mu.Lock()
		rs := append([]probe.Result(nil), c.rs...)
		c.mu.Unlock()
		if pred(rs) {
			return rs
		}
		select {
		case <-c.sig:
		case <-deadline:
			return rs
		}
	}
}

func count(n int) func([]probe.Result) bool {
	return func(rs []probe.Result) bool { return len(rs) >= n }
}

// peerOf returns the Peer of a responder's QP i.
func peerOf(r *probe.Responder, i int) probe.Peer {
	g := r.GID()
	return probe.Peer{Name: g.Addr().String(), Addr: g.Addr(), GID: g, QPN: r.QPNs()[i], QKey: probe.QKey}
}
