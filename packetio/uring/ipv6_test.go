//go:build linux

package uring_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/uring"
	"github.com/goroce/goroce/wire"
)

var lo6 = netip.MustParseAddr("::1")

// A Conn on an IPv6 address, on each receive path, with and without
// GSO/GRO: RoCEv2 datagrams sealed for the IPv6 pseudo-header arrive
// intact, with their sender, port, local address and traffic class (each
// packet's own, ECT(0) added, or the Conn's).
func TestIPv6Loopback(t *testing.T) {
	for _, p := range paths {
		for _, off := range []uring.Offload{uring.OffloadOff, uring.OffloadAuto} {
			t.Run(p.name+"/"+off.String(), func(t *testing.T) {
				o := uring.Options{Port: uring.AnyPort, GSO: off, GRO: off}
				b, err := listenOrSkip(t, p.listen, lo6, o)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				o.DstPort = int(b.LocalAddrPort().Port())
				a, err := listenOrSkip(t, p.listen, lo6, o)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				fl := wire.Flow{Src: lo6, Dst: lo6, SrcPort: a.LocalAddrPort().Port(), DstPort: b.LocalAddrPort().Port()}
				sizes := []int{64, 1040, 1040, 1040, 1040, 1040, 500, 272, 272}
				batch := a.TxBatch(len(sizes))
				sent := make([][]byte, len(sizes))
				for i, n := range sizes {
					batch[i].Buf = rocetest.Packet(t, batch[i].Buf, &fl, n, i)
					batch[i].Addr = lo6
					if i >= 6 {
						batch[i].TOS = 0xB8
					}
					sent[i] = bytes.Clone(batch[i].Buf)
				}
				if n, err := a.Transmit(batch); n != len(batch) || err != nil {
					t.Fatalf("Transmit = %d, %v", n, err)
				}
				got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
				for i, q := range got {
					if !bytes.Equal(q.Buf, sent[i]) {
						t.Fatalf("packet %d differs", i)
					}
					if _, _, err := fl.CheckDatagramICRC(q.Buf); err != nil {
						t.Errorf("packet %d: ICRC over IPv6: %v", i, err)
					}
					want := packetio.ECT0
					if i >= 6 {
						want = 0xBA
					}
					if q.Addr != lo6 || q.Local != lo6 || q.Port != fl.SrcPort || q.TOS != want {
						t.Errorf("packet %d: from %v port %d to %v, TOS %#02x (want %#02x)", i, q.Addr, q.Port, q.Local, q.TOS, want)
					}
				}
			})
		}
	}
}

// Over IPv4 and IPv6 between two namespaces, each datagram leaves with the
// traffic class and hop limit its packet asks for, alone and in a GSO run:
// seen in a capture on the receiving veth.
func TestNetnsIPHeaderPerPacket(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix})
	a6, b6 := rocetest.AddIPv6(t, p)
	type pkt struct {
		size     int
		tos, ttl uint8
	}
	pkts := []pkt{{100, 0, 0}, {1000, 0xB8, 9}, {1000, 0xB8, 9}, {1000, 0xB8, 9}, {1000, 0x61, 0}, {300, 0, 200}, {300, 0x03, 1}}
	for _, c := range []struct {
		name     string
		from, to netip.Addr
	}{{"ipv4", p.AddrA, p.AddrB}, {"ipv6", a6, b6}} {
		t.Run(c.name, func(t *testing.T) {
			a := listenIn(t, p.A, c.from, uring.Options{})
			b := listenIn(t, p.B, c.to, uring.Options{})
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
			for i := 0; i < len(pkts); {
				q := pkts[i]
				var f wire.Frame
				capt.Next(t, &f)
				tos, ttl, _ := rocetest.IPFields(&f)
				wantTOS, wantTTL := packetio.PacketTOS(q.tos, packetio.ECT0, false), q.ttl
				if wantTTL == 0 {
					wantTTL = 64
				}
				if tos != wantTOS || ttl != wantTTL {
					t.Errorf("datagram %d: TOS %#02x TTL %d, want %#02x and %d", i, tos, ttl, wantTOS, wantTTL)
				}
				i += max(1, len(f.Transport())/q.size) // a GSO message crosses the veth whole
			}
			packetiotest.Recv(t, b, len(pkts), 5*time.Second)
		})
	}
}

// Sending over IPv6 with a traffic class and hop limit of each packet's own
// allocates nothing.
func TestIPv6TransmitAllocs(t *testing.T) {
	o := uring.Options{Port: uring.AnyPort}
	b, err := listenOrSkip(t, uring.Listen, lo6, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o.DstPort = int(b.LocalAddrPort().Port())
	a, err := listenOrSkip(t, uring.Listen, lo6, o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
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
