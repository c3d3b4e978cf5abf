//go:build linux

package afxdp_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/packetiotest"
)

// The link subnet of this package's namespace pairs (distinct from other
// packages' test addresses).
var testPrefix = netip.MustParsePrefix("10.79.6.0/24")

// newPair makes two namespaces joined by veth with MTU 1500.
func newPair(t testing.TB) *netns.Pair {
	return netns.NewPair(t, netns.Options{Prefix: testPrefix, MTU: 1500})
}

// listenIn opens a Conn inside ns, closed at the end of the test; it skips
// the test when the kernel or privileges refuse AF_XDP.
func listenIn(t testing.TB, ns *netns.NS, addr netip.Addr, opts afxdp.Options) *afxdp.Conn {
	t.Helper()
	var c *afxdp.Conn
	err := ns.Do(func() (err error) {
		c, err = afxdp.Listen(addr, opts)
		return err
	})
	if errors.Is(err, packetio.ErrNotSupported) {
		testenv.Skipf(t, testenv.AFXDP, "AF_XDP refused: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNetnsConformance(t *testing.T) {
	p := newPair(t)
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		a := listenIn(t, p.A, p.AddrA, afxdp.Options{})
		b := listenIn(t, p.B, p.AddrB, afxdp.Options{})
		t.Logf("mode %s on %s, MaxPacket %d", a.Mode(), a.Interface(), a.MaxPacket())
		return a, b
	})
}
