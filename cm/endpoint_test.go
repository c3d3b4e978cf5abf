package cm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

func TestEndpointMessage(t *testing.T) {
	e := verbs.Endpoint{QPN: 0x123456, PSN: 0xabcdef, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.1.2.3")),
		MTU: verbs.MTU2048, RdAtomic: 16, RKey: 0xdeadbeef, Addr: 0x7f0011223344, Len: 1 << 20}
	b := AppendEndpoint(nil, e)
	if len(b) != EndpointMessageLen {
		t.Fatalf("%d bytes, want %d", len(b), EndpointMessageLen)
	}
	got, err := ParseEndpoint(b)
	if err != nil || got != e {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, e)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"short", b[:20]}, {"magic", append([]byte("XREP"), b[4:]...)}, {"version", append(append([]byte{}, b[:4]...), append([]byte{2}, b[5:]...)...)},
		{"mtu", append(append([]byte{}, b[:5]...), append([]byte{9}, b[6:]...)...)}, {"empty", nil},
	} {
		if _, err := ParseEndpoint(c.b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", c.name, err)
		}
	}
}

// TestExchangeEndpoints swaps Endpoints over TCP on loopback, and gives up
// when the context ends while the other side says nothing.
func TestExchangeEndpoints(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := verbs.Endpoint{QPN: 1, PSN: 2, MTU: verbs.MTU1024, RdAtomic: 4}
	b := verbs.Endpoint{QPN: 3, PSN: 4, MTU: verbs.MTU4096, RdAtomic: 16, RKey: 5, Addr: 6, Len: 7}
	errc := make(chan error, 1)
	go func() {
		got, err := AcceptEndpoint(ctx, ln, a)
		if err == nil && got != b {
			err = errors.New("server got another endpoint")
		}
		errc <- err
	}()
	got, err := DialEndpoint(ctx, ln.Addr().String(), b)
	if err != nil || got != a {
		t.Fatalf("client: %+v, %v; want %+v", got, err, a)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}

	// A silent peer: the exchange ends with the context.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := AcceptEndpoint(short, ln, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exchange with a silent peer: %v, want DeadlineExceeded", err)
	}
	// Nobody comes: Accept ends with the context.
	short3, cancel3 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel3()
	if _, err := AcceptEndpoint(short3, ln, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept with nobody coming: %v, want DeadlineExceeded", err)
	}
}
