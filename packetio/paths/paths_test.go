package paths

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
)

// exchange sends one datagram from a to b and checks it arrives intact
// from a's address.
func exchange(t *testing.T, a, b packetio.Conn) {
	t.Helper()
	exchangeMsg(t, a, b, []byte("goroce packet path check: 0123456789abcdef"))
}

// exchangeMsg sends msg from a to b and checks it arrives intact from a's
// address.
func exchangeMsg(t *testing.T, a, b packetio.Conn, msg []byte) {
	t.Helper()
	tx := a.TxBatch(1)
	if len(tx) != 1 {
		t.Fatalf("TxBatch lent %d packets", len(tx))
	}
	tx[0].Buf, tx[0].Addr = append(tx[0].Buf[:0], msg...), b.LocalAddr()
	if n, err := a.Transmit(tx); n != 1 || err != nil {
		t.Fatalf("Transmit: %d, %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pkts, err := b.Receive(time.Now().Add(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			if !bytes.Equal(p.Buf, msg) || p.Addr != a.LocalAddr() {
				t.Fatalf("received %q from %v, want %q from %v", p.Buf[:min(len(p.Buf), 64)], p.Addr, msg[:min(len(msg), 64)], a.LocalAddr())
			}
			return
		}
	}
	t.Fatal("nothing received in 5 s")
}

// TestOpenLoopback opens every socket path by name on loopback, and auto,
// which passes over AF_XDP there and says why.
func TestOpenLoopback(t *testing.T) {
	a4, b4 := netip.MustParseAddr("127.0.9.1"), netip.MustParseAddr("127.0.9.2")
	for _, name := range []string{UDP, Uring, Auto} { // auto: udp on loopback
		t.Run(name, func(t *testing.T) {
			a, ca, err := Open(a4, name, Options{})
			if name == Uring && err != nil {
				testenv.Skipf(t, testenv.Uring, "io_uring unavailable: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, cb, err := Open(b4, name, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if ca.Path != cb.Path {
				t.Fatalf("two opens chose %q and %q", ca.Path, cb.Path)
			}
			switch name {
			case Auto:
				// udp: with GSO at once; without, after passing over
				// AF_XDP, which loopback cannot take.
				if ca.Path != UDP || (len(ca.Skipped) == 0) != a.(*udp.Conn).Offloads().GSO {
					t.Fatalf("auto on loopback: %v", ca)
				}
				if len(ca.Skipped) > 0 && !skipped(ca, AFXDP) {
					t.Fatalf("auto on loopback without GSO does not say why not AF_XDP: %v", ca)
				}
			default:
				if ca.Path != name || len(ca.Skipped) != 0 {
					t.Fatalf("opened %v, want %s", ca, name)
				}
			}
			if name == Uring && ca.Detail == "" {
				t.Errorf("uring path reports no features")
			}
			// udp sends from per-packet source ports, uring from its own.
			if got, want := packetio.PerPacketSourcePort(a), ca.Path == UDP; got != want {
				t.Errorf("%s: PerPacketSourcePort %v, want %v", ca.Path, got, want)
			}
			t.Logf("%s: %v", name, ca)
			exchange(t, a, b)
			exchange(t, b, a)
		})
	}
}

// TestInspect: an inspection open binds a port of the kernel's choosing, so
// that it works beside a device holding 4791 on the same address.
func TestInspect(t *testing.T) {
	addr := netip.MustParseAddr("127.0.9.3")
	busy, _, err := Open(addr, UDP, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, name := range []string{UDP, Auto} {
		c, ch, err := Open(addr, name, Options{Inspect: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ch.Path == AFXDP {
			t.Errorf("%s: inspection took AF_XDP", name)
		}
		c.Close()
	}
	if _, _, err := Open(addr, UDP, Options{}); err == nil {
		t.Error("a second device on port 4791 of the same address opened")
	}
}

func TestUnknownPath(t *testing.T) {
	if _, _, err := Open(netip.MustParseAddr("127.0.9.4"), "dpdk", Options{}); !errors.Is(err, ErrUnknownPath) {
		t.Fatalf("err %v, want ErrUnknownPath", err)
	}
}

// openAutoUDP opens the auto path with o in p's namespace A and a plain UDP path
// in B, both closed when t ends.
func openAutoUDP(t *testing.T, p *netns.Pair, o Options) (a, b packetio.Conn, ch Chosen) {
	t.Helper()
	if err := p.A.Do(func() (err error) {
		a, ch, err = Open(p.AddrA, Auto, o)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := p.B.Do(func() (err error) {
		b, _, err = Open(p.AddrB, UDP, Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b, ch
}

// skipped reports whether auto's choice ch says why it passed over path.
func skipped(ch Chosen, path string) bool {
	for _, s := range ch.Skipped {
		if strings.HasPrefix(s, path+": ") {
			return true
		}
	}
	return false
}

// refused checks that auto, having not taken AF_XDP, says why.
func refused(t *testing.T, ch Chosen) {
	t.Helper()
	if !skipped(ch, AFXDP) {
		t.Fatalf("auto chose %v without saying why not AF_XDP", ch)
	}
	t.Logf("AF_XDP refused here: %v", ch.Skipped)
}

// TestAutoNetns: between two namespaces over veth, auto takes the udp path
// where its UDP GSO works (as on any kernel since 4.18 with a checksum
// offload), at once; the chosen path carries a datagram both ways to a
// plain UDP path.
func TestAutoNetns(t *testing.T) {
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{})
	a, b, ch := openAutoUDP(t, p, Options{})
	t.Logf("auto chose %v", ch)
	if u, ok := a.(*udp.Conn); !ok || !u.Offloads().GSO || len(ch.Skipped) != 0 {
		t.Fatalf("auto chose %v over veth, want udp with GSO at once", ch)
	}
	exchange(t, a, b)
	exchange(t, b, a)
}

// TestAutoNetnsNoGSO: with the udp path's GSO turned off, auto takes AF_XDP
// where the kernel allows it (else says why not), having said why it passed
// over udp with GSO, and the chosen path carries a datagram both ways to a
// plain UDP path.
func TestAutoNetnsNoGSO(t *testing.T) {
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{})
	a, b, ch := openAutoUDP(t, p, Options{NoGSO: true})
	t.Logf("auto chose %v", ch)
	if !skipped(ch, "udp with GSO") {
		t.Errorf("auto chose %v without saying why not udp with GSO", ch)
	}
	if ch.Path != AFXDP {
		refused(t, ch)
	}
	exchange(t, a, b)
	exchange(t, b, a)
}

// TestAutoNetnsJumbo: over veth of MTU 9000, auto without GSO takes AF_XDP
// with frames chained (multi-buffer, said in the detail) where the kernel
// allows it, with room for a 4096-byte path MTU's packets (MaxPacket 4160,
// which a soft device turns into active MTU 4096), and a 4158-byte
// transport packet (a 4200-byte Ethernet frame) goes both ways to a plain
// UDP path intact.
func TestAutoNetnsJumbo(t *testing.T) {
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{MTU: 9000})
	a, b, ch := openAutoUDP(t, p, Options{NoGSO: true})
	t.Logf("auto chose %v, MaxPacket %d", ch, a.MaxPacket())
	switch {
	case ch.Path != AFXDP:
		refused(t, ch)
	case !strings.Contains(ch.Detail, "multi-buffer"):
		t.Errorf("AF_XDP at MTU 9000 without multi-buffer in its detail: %v", ch)
	}
	if a.MaxPacket() != packetio.DefaultMaxPacket {
		t.Errorf("MaxPacket %d at MTU 9000, want %d", a.MaxPacket(), packetio.DefaultMaxPacket)
	}
	msg := make([]byte, 4200-42)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	exchangeMsg(t, a, b, msg)
	exchangeMsg(t, b, a, msg)
}

// TestOpenTOS: Options.TOS and NoECN reach the socket paths: a sends DSCP
// 46 with ECT(0) added, b, with NoECN, not-ECT, as the peer's Packet.TOS
// tells.
func TestOpenTOS(t *testing.T) {
	a4, b4 := netip.MustParseAddr("127.0.9.5"), netip.MustParseAddr("127.0.9.6")
	for _, name := range []string{UDP, Uring} {
		t.Run(name, func(t *testing.T) {
			a, _, err := Open(a4, name, Options{TOS: 46 << 2})
			if name == Uring && err != nil {
				testenv.Skipf(t, testenv.Uring, "io_uring unavailable: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, _, err := Open(b4, name, Options{NoECN: true})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if got := tosOf(t, a, b); got != 46<<2|packetio.ECT0 {
				t.Errorf("a's packet arrived with TOS %#02x, want %#02x", got, 46<<2|packetio.ECT0)
			}
			if got := tosOf(t, b, a); got != packetio.NotECT {
				t.Errorf("b's packet (NoECN) arrived with TOS %#02x, want 0", got)
			}
		})
	}
}

// tosOf sends one packet from a to b and returns the TOS byte b saw.
func tosOf(t *testing.T, a, b packetio.Conn) uint8 {
	t.Helper()
	tx := a.TxBatch(1)
	tx[0].Buf, tx[0].Addr = append(tx[0].Buf[:0], make([]byte, 64)...), b.LocalAddr()
	if n, err := a.Transmit(tx); n != 1 || err != nil {
		t.Fatalf("Transmit: %d, %v", n, err)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		pkts, err := b.Receive(time.Now().Add(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(pkts) > 0 {
			return pkts[0].TOS
		}
	}
	t.Fatal("nothing received in 5 s")
	return 0
}
