//go:build linux

package udp_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/udp"
)

// Packets leave ECT(0) by default, with the TOS asked for otherwise, and
// not-ECT with NoECN: as a plain socket with IP_RECVTOS sees them, and as
// the receiving Conn reports them (Packet.TOS), from the main socket and
// from an extra source port's.
func TestTOS(t *testing.T) {
	for _, tc := range rocetest.TOSCases {
		t.Run(tc.Name, func(t *testing.T) {
			fd, port := rocetest.TOSReceiver(t, lo2)
			o := noGSO()
			o.Port, o.DstPort, o.TOS, o.NoECN = udp.AnyPort, int(port), tc.TOS, tc.NoECN
			a, err := udp.Listen(lo1, o)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			rocetest.SendOne(t, a, lo2)
			if got := rocetest.ReadTOS(t, fd); got != tc.Want {
				t.Errorf("plain receiver: TOS %#02x, want %#02x", got, tc.Want)
			}

			o = udp.Options{TOS: tc.TOS, NoECN: tc.NoECN}
			c, d := loopbackPair(t, o)
			for _, sport := range []uint16{0, freePort(t)} {
				b := c.TxBatch(1)
				b[0].Buf, b[0].Addr, b[0].Port = append(b[0].Buf[:0], make([]byte, 64)...), lo2, sport
				if n, err := c.Transmit(b); n != 1 || err != nil {
					t.Fatalf("Transmit: %d, %v", n, err)
				}
				if got := packetiotest.Recv(t, d, 1, 5*time.Second)[0]; got.TOS != tc.Want {
					t.Errorf("from port %d: Packet.TOS %#02x, want %#02x", sport, got.TOS, tc.Want)
				}
			}
		})
	}
}

// A receive buffer overflowed: RxDropped and Stats().KernelRxDrops say
// how many datagrams the kernel dropped, as /proc/net/udp does
// (rocetest.CheckKernelDrops); afterwards GRO trains still arrive with
// every control message (rocetest.GROAfterDrops).
func TestKernelRxDrops(t *testing.T) {
	a, b := loopbackPair(t, udp.Options{RecvBuffer: 4096, GSO: udp.OffloadRequire, GRO: udp.OffloadRequire, Batch: 128})
	rocetest.CheckKernelDrops(t, b, lo1, 900, func() uint64 { return rocetest.ProcDrops(t, b.LocalAddrPort()) })
	rocetest.GROAfterDrops(t, a, b)
}

// The same inside a namespace the test creates, on port 4791, without
// GRO.
func TestNetnsKernelRxDrops(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	b := listenIn(t, p.B, p.AddrB, udp.Options{RecvBuffer: 4096, GRO: udp.OffloadOff})
	var drops uint64
	if err := p.B.Do(func() error {
		drops = rocetest.CheckKernelDrops(t, b, p.AddrB, 900, func() uint64 { return rocetest.ProcDrops(t, b.LocalAddrPort()) })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of 901 datagrams dropped", drops)
}
