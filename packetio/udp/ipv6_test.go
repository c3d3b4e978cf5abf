//go:build linux

package udp_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

var lo6 = netip.MustParseAddr("::1")

// ipv6Pair opens two Conns on ::1 on ports of the kernel's choosing, a
// sending to b's.
func ipv6Pair(t *testing.T, o udp.Options) (a, b *udp.Conn) {
	t.Helper()
	o.Port = udp.AnyPort
	b, err := udp.Listen(lo6, o)
	if err != nil {
		t.Fatalf("Listen(::1): %v", err)
	}
	t.Cleanup(func() { b.Close() })
	o.DstPort = int(b.LocalAddrPort().Port())
	if a, err = udp.Listen(lo6, o); err != nil {
		t.Fatalf("Listen(::1): %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a, b
}

// sendTo sends packets sealed for the flow from a to b (IPv6 ICRC) with the
// sizes given, packet i with traffic class tos(i), and returns them.
func sendTo(t *testing.T, a, b *udp.Conn, sizes []int, tos func(int) uint8) [][]byte {
	t.Helper()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: b.LocalAddrPort().Port()}
	batch := a.TxBatch(len(sizes))
	if len(batch) != len(sizes) {
		t.Fatalf("TxBatch lent %d of %d", len(batch), len(sizes))
	}
	sent := make([][]byte, len(sizes))
	for i, n := range sizes {
		batch[i].Buf = rocetest.Packet(t, batch[i].Buf, &fl, n, i)
		batch[i].Addr, batch[i].TOS = b.LocalAddr(), tos(i)
		sent[i] = bytes.Clone(batch[i].Buf)
	}
	if n, err := a.Transmit(batch); n != len(batch) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	return sent
}

// A Conn on an IPv6 address sends and receives RoCEv2 datagrams whose ICRC
// is right for the IPv6 pseudo-header, alone and in GSO runs, reports each
// one's sender, port, local address and traffic class, and sends each with
// its own traffic class (Packet.TOS: ECT(0) added) or the Conn's.
func TestIPv6Loopback(t *testing.T) {
	for _, gso := range []udp.Offload{udp.OffloadOff, udp.OffloadAuto} {
		t.Run(gso.String(), func(t *testing.T) {
			a, b := ipv6Pair(t, udp.Options{GSO: gso, GRO: gso})
			sizes := []int{64, 1040, 1040, 1040, 1040, 1040, 1040, 1040, 1040, 500, 272, 272, 272}
			tos := func(i int) uint8 {
				if i >= 9 {
					return 0xB8 // DSCP 46
				}
				return 0
			}
			sent := sendTo(t, a, b, sizes, tos)
			got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
			fl := wire.Flow{Src: lo6, Dst: lo6, SrcPort: a.LocalAddrPort().Port(), DstPort: b.LocalAddrPort().Port()}
			for i := range got {
				p := got[i]
				if !bytes.Equal(p.Buf, sent[i]) {
					t.Fatalf("packet %d differs", i)
				}
				if _, _, err := fl.CheckDatagramICRC(p.Buf); err != nil {
					t.Errorf("packet %d: ICRC over IPv6: %v", i, err)
				}
				if p.Addr != lo6 || p.Local != lo6 || p.Port != a.LocalAddrPort().Port() {
					t.Errorf("packet %d: from %v port %d to %v", i, p.Addr, p.Port, p.Local)
				}
				want := packetio.ECT0
				if i >= 9 {
					want = 0xBA
				}
				if p.TOS != want {
					t.Errorf("packet %d: traffic class %#02x, want %#02x", i, p.TOS, want)
				}
			}
			t.Logf("offloads %v, stats %+v", a.Offloads(), a.Stats())
		})
	}
}

// Over IPv4 and IPv6 between two namespaces, each datagram leaves with the
// traffic class and hop limit its packet asks for (Packet.TOS, HopLimit),
// alone and in a GSO run, and with the Conn's when it asks for none: seen
// in a capture on the receiving veth. The ECN field follows PacketTOS: a
// packet's DSCP with ECT(0), its own ECN field when set, not-ECT under
// NoECN.
func TestNetnsIPHeaderPerPacket(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a6, b6 := rocetest.AddIPv6(t, p)
	type pkt struct {
		size     int
		tos, ttl uint8
	}
	pkts := []pkt{{100, 0, 0}, {1000, 0xB8, 9}, {1000, 0xB8, 9}, {1000, 0xB8, 9}, {1000, 0x61, 0}, {300, 0, 200}, {300, 0x03, 1}}
	for _, c := range []struct {
		name    string
		from    netip.Addr
		to      netip.Addr
		noECN   bool
		connTOS uint8
	}{{"ipv4", p.AddrA, p.AddrB, false, 0}, {"ipv6", a6, b6, false, 0}, {"ipv6-tos", a6, b6, false, 0x20}, {"ipv4-noecn", p.AddrA, p.AddrB, true, 0}, {"ipv6-noecn", a6, b6, true, 0}} {
		t.Run(c.name, func(t *testing.T) {
			o := udp.Options{NoECN: c.noECN, TOS: c.connTOS}
			a := listenIn(t, p.A, c.from, o)
			b := listenIn(t, p.B, c.to, o)
			capt := rocetest.NewCapture(t, p.B, netns.LinkName)
			fl := wire.Flow{Src: c.from, Dst: c.to, SrcPort: wire.RoCEv2Port}
			batch := a.TxBatch(len(pkts))
			for i, q := range pkts {
				batch[i].Buf = rocetest.Packet(t, batch[i].Buf, &fl, q.size, i)
				batch[i].Addr, batch[i].TOS, batch[i].HopLimit = c.to, q.tos, q.ttl
			}
			if n, err := a.Transmit(batch); n != len(pkts) || err != nil {
				t.Fatalf("Transmit = %d, %v", n, err)
			}
			connTOS := packetio.SendTOS(c.connTOS, c.noECN)
			for i := 0; i < len(pkts); {
				q := pkts[i]
				var f wire.Frame
				capt.Next(t, &f)
				tos, ttl, _ := rocetest.IPFields(&f)
				wantTOS, wantTTL := packetio.PacketTOS(q.tos, connTOS, c.noECN), q.ttl
				if wantTTL == 0 {
					wantTTL = 64
				}
				if tos != wantTOS || ttl != wantTTL {
					t.Errorf("datagram %d: TOS %#02x TTL %d, want %#02x and %d", i, tos, ttl, wantTOS, wantTTL)
				}
				// A GSO message crosses the veth whole: one capture of
				// its segments, which share its header.
				segs := max(1, len(f.Transport())/q.size)
				if segs == 1 {
					if err := wire.CheckICRC(f.IPUDP(), f.Transport()); err != nil {
						t.Errorf("datagram %d: ICRC over the header on the wire: %v", i, err)
					}
				}
				i += segs
			}
			packetiotest.Recv(t, b, len(pkts), 5*time.Second)
			t.Logf("offloads %v, GSO messages %d", a.Offloads(), a.Stats().GSOMessages)
		})
	}
}

// Sending over IPv6 with a traffic class and hop limit of each packet's own
// (control messages per sendmmsg entry) allocates nothing.
func TestIPv6TransmitAllocs(t *testing.T) {
	a, b := ipv6Pair(t, udp.Options{})
	fl := wire.Flow{Src: lo6, Dst: lo6, SrcPort: a.LocalAddrPort().Port(), DstPort: b.LocalAddrPort().Port()}
	pkt := rocetest.Packet(t, nil, &fl, 1040, 1)
	allocs := testing.AllocsPerRun(100, func() {
		batch := a.TxBatch(8)
		for i := range batch {
			batch[i].Buf = append(batch[i].Buf[:0], pkt...)
			batch[i].Addr, batch[i].TOS, batch[i].HopLimit = lo6, uint8(0x20*(i%2)), uint8(i)
		}
		a.Transmit(batch)
		b.Receive(packetio.PollDeadline())
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per batch, want 0", allocs)
	}
}
