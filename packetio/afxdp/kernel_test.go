//go:build linux

package afxdp_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/afxdp"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
)

// Frames leave ECT(0) by default, with the TOS asked for otherwise, and
// not-ECT with NoECN; the receiving Conn reads the byte from the frame's
// IPv4 header (Packet.TOS).
func TestNetnsTOS(t *testing.T) {
	p := newPair(t)
	for _, tc := range rocetest.TOSCases {
		t.Run(tc.Name, func(t *testing.T) {
			o := afxdp.Options{TOS: tc.TOS, NoECN: tc.NoECN}
			a := listenIn(t, p.A, p.AddrA, o)
			b := listenIn(t, p.B, p.AddrB, o)
			rocetest.SendOne(t, a, p.AddrB)
			if got := packetiotest.Recv(t, b, 1, 5*time.Second)[0]; got.TOS != tc.Want {
				t.Errorf("Packet.TOS %#02x, want %#02x", got.TOS, tc.Want)
			}
			a.Close()
			b.Close()
		})
	}
}

// Datagrams that find no fill-ring frame (the Conn does not read) are
// dropped by the kernel, and RxDropped, refreshed by Receive, says how
// many: rx_dropped and rx_ring_full of XDP_STATISTICS.
func TestNetnsKernelRxDrops(t *testing.T) {
	p := newPair(t)
	b := listenIn(t, p.B, p.AddrB, afxdp.Options{Frames: 64, RxFrames: 32, Batch: 16})
	if d := b.RxDropped(); d != 0 {
		t.Fatalf("RxDropped %d before any traffic", d)
	}
	if err := p.A.Do(func() error {
		rocetest.Flood(t, p.AddrA, b.LocalAddrPort(), 900, 200)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		pkts, err := b.Receive(time.Now().Add(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(pkts) == 0 {
			break
		}
		got += len(pkts)
	}
	x, err := b.XDPStats()
	if err != nil {
		t.Fatal(err)
	}
	d := b.RxDropped()
	if d == 0 || d != x.RxDropped+x.RxRingFull || b.Stats().KernelRxDrops != d {
		t.Fatalf("RxDropped %d, Stats().KernelRxDrops %d; kernel: rx_dropped %d, rx_ring_full %d; %d of 900 read",
			d, b.Stats().KernelRxDrops, x.RxDropped, x.RxRingFull, got)
	}
	if got+int(d) > 900 {
		t.Errorf("%d read and %d dropped of 900", got, d)
	}
	t.Logf("%d read, %d dropped (rx_dropped %d, rx_ring_full %d), %d redirected", got, d, x.RxDropped, x.RxRingFull, x.Redirected)
}
