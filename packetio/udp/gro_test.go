//go:build linux

package udp_test

import (
	"fmt"
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

// GRO trains on loopback: rocetest.GROLoopback.
func TestGROLoopback(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadRequire, GRO: udp.OffloadRequire, Batch: 128})
	rocetest.GROLoopback(t, a, b)
}

// A GRO Conn receives datagrams sent alone as before: rocetest.GROSingles.
func TestGROSingles(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadOff, GRO: udp.OffloadRequire})
	rocetest.GROSingles(t, a, b)
}

// Receive with GRO does not allocate.
func TestGRONoAllocs(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{GSO: udp.OffloadRequire, GRO: udp.OffloadRequire})
	if allocs := sendRecvAllocs(t, a, b, 4112); allocs != 0 {
		t.Errorf("%v allocations per GSO Transmit and GRO Receive", allocs)
	}
	if s := b.Stats(); s.GROBuffers == 0 {
		t.Errorf("no GRO buffers: %+v", s)
	}
}

// Between two namespaces, with GSO off on the sending veth (so the kernel
// cuts GSO messages into datagrams before the link) and GRO on on the
// receiving one (which gives it NAPI), the kernel coalesces the datagrams
// again: Receive splits the trains, and each packet's Identification is
// its train's first's plus its position. Datagrams sent one per Transmit
// (Identification 0 each) arrive too, coalesced or not. (A veth hands its
// peer's packets to NAPI, and so to GRO, only when the peer has GRO on and,
// if the sender has TSO, UDP GRO forwarding too: veth_skb_is_eligible_for_gro.)
func TestNetnsGRO(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500})
	rocetest.SetFeatures(t, p.A, map[string]bool{"tx-udp-segmentation": false})
	rocetest.SetFeatures(t, p.B, map[string]bool{"rx-gro": true, "rx-udp-gro-forwarding": true})
	a := listenIn(t, p.A, p.AddrA, udp.Options{GSO: udp.OffloadRequire, Batch: 128})
	b := listenIn(t, p.B, p.AddrB, udp.Options{GRO: udp.OffloadRequire, Batch: 128})
	fl := wire.Flow{Src: p.AddrA, Dst: p.AddrB, SrcPort: wire.RoCEv2Port}
	warmUp(t, a, b, p.AddrB)
	sent := rocetest.Send(t, a, p.AddrB, wire.RoCEv2Port, rocetest.Repeat(40, 1040, 528))
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	trains := rocetest.CheckTrains(t, got, sent, fl)
	s := b.Stats()
	t.Logf("GSO message of %d packets: %d trains, receiver %d GRO buffers of %d segments", len(sent), trains, s.GROBuffers, s.GROSegments)
	if s.GROBuffers == 0 {
		t.Errorf("nothing coalesced: %+v", s)
	}
	// One packet per Transmit: each leaves with Identification 0.
	var singles [][]byte
	for range 16 {
		singles = append(singles, rocetest.Send(t, a, p.AddrB, wire.RoCEv2Port, []int{1040})...)
	}
	got = packetiotest.Recv(t, b, len(singles), 5*time.Second)
	trains = rocetest.CheckTrains(t, got, singles, fl)
	t.Logf("16 datagrams sent alone: %d trains", trains)
}

// BenchmarkTransmitGSO sends batches of 32 RoCE packets of one size on
// loopback and receives them, with GSO and GRO on and off: the bytes per
// second of the UDP path's send and receive.
func BenchmarkTransmitGSO(b *testing.B) {
	for _, size := range []int{1040, 4112} {
		for _, on := range []bool{true, false} {
			b.Run(fmt.Sprintf("size=%d/gso=%v", size, on), func(b *testing.B) {
				o := udp.Options{}
				if !on {
					o.GSO, o.GRO = udp.OffloadOff, udp.OffloadOff
				}
				tx, rx := loopbackPair(b, o)
				port := rx.LocalAddrPort().Port()
				fl := wire.Flow{Src: tx.LocalAddr(), Dst: rx.LocalAddr(), SrcPort: port, DstPort: port}
				tmpl := rocetest.Packet(b, nil, &fl, size, 1)
				const n = 32
				b.SetBytes(n * int64(size))
				b.ReportAllocs()
				for b.Loop() {
					batch := tx.TxBatch(n)
					for i := range batch {
						batch[i].Buf = append(batch[i].Buf[:0], tmpl...)
						batch[i].Addr = rx.LocalAddr()
					}
					if s, err := tx.Transmit(batch); s != n || err != nil {
						b.Fatalf("Transmit = %d, %v", s, err)
					}
					for got := 0; got < n; {
						pkts, err := rx.Receive(time.Now().Add(time.Second))
						if err != nil || len(pkts) == 0 {
							b.Fatalf("Receive: %d, %v", len(pkts), err)
						}
						got += len(pkts)
					}
				}
			})
		}
	}
}

// warmUp sends single datagrams from a to b until one arrives (5 tries, a
// second each): a veth whose features were just changed dropped a whole
// GSO message sent at once on a busy machine (TestNetnsGRO received none
// of 41 in 5 s, once).
func warmUp(t *testing.T, a rocetest.Conn, b packetio.Conn, to netip.Addr) {
	t.Helper()
	for try := 0; try < 5; try++ {
		rocetest.Send(t, a, to, wire.RoCEv2Port, []int{1040})
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			pkts, err := b.Receive(end)
			if err != nil {
				t.Fatalf("Receive: %v", err)
			}
			if len(pkts) > 0 {
				if try > 0 {
					t.Logf("the link carried a datagram at the %d-th try", try+1)
				}
				return
			}
		}
	}
	t.Fatal("no datagram arrived in 5 tries")
}
