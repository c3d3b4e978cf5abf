package verbstest_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

func softEnv(t *testing.T, ca, cb packetio.Conn) verbstest.Env {
	a, err := soft.New(soft.Options{Name: "soft0", Conn: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := soft.New(soft.Options{Name: "soft1", Conn: cb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctxA, err := a.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctxB, err := b.Open()
	if err != nil {
		t.Fatal(err)
	}
	return verbstest.Env{A: ctxA, B: ctxB, GIDIndexA: verbs.DefaultGIDIndex, GIDIndexB: verbs.DefaultGIDIndex, Fresh: freshPipe}
}

// freshPipe makes two new soft devices joined by the in-memory path, for
// the lifetime tests that close them.
func freshPipe(t *testing.T) verbstest.Fresh {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2"), pipe.Options{})
	env := softEnv(t, ca, cb)
	return verbstest.Fresh{A: env.A, B: env.B, CloseDeviceA: env.A.Device().(*soft.Device).Close}
}

// TestSoftPipe runs the suite on two soft devices joined by the in-memory
// packet path.
func TestSoftPipe(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	verbstest.Run(t, softEnv(t, ca, cb))
}

// TestSoftUDP runs the suite on two soft devices over UDP sockets on
// loopback addresses of this package's own (127.0.12.1 and .2).
func TestSoftUDP(t *testing.T) {
	ca, err := udp.Listen(netip.MustParseAddr("127.0.12.1"), udp.Options{})
	if err != nil {
		t.Skipf("UDP on 127.0.12.1:4791: %v", err)
	}
	cb, err := udp.Listen(netip.MustParseAddr("127.0.12.2"), udp.Options{})
	if err != nil {
		ca.Close()
		t.Skipf("UDP on 127.0.12.2:4791: %v", err)
	}
	verbstest.Run(t, softEnv(t, ca, cb))
}
