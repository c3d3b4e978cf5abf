//go:build linux

package uring_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/internal/rocetest"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/packetio/uring"
)

// Packets leave ECT(0) by default, with the TOS asked for otherwise, and
// not-ECT with NoECN: as a plain socket with IP_RECVTOS sees them, and as
// the receiving Conn reports them (Packet.TOS).
func TestTOS(t *testing.T) {
	for _, tc := range rocetest.TOSCases {
		t.Run(tc.Name, func(t *testing.T) {
			fd, port := rocetest.TOSReceiver(t, lo2)
			o := noGSO()
			o.Port, o.DstPort, o.TOS, o.NoECN = uring.AnyPort, int(port), tc.TOS, tc.NoECN
			a, err := listenOrSkip(t, uring.Listen, lo1, o)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			rocetest.SendOne(t, a, lo2)
			if got := rocetest.ReadTOS(t, fd); got != tc.Want {
				t.Errorf("plain receiver: TOS %#02x, want %#02x", got, tc.Want)
			}

			c, d := loopbackPair(t, uring.Listen, uring.Options{TOS: tc.TOS, NoECN: tc.NoECN})
			rocetest.SendOne(t, c, lo2)
			if got := packetiotest.Recv(t, d, 1, 5*time.Second)[0]; got.TOS != tc.Want {
				t.Errorf("Packet.TOS %#02x, want %#02x", got.TOS, tc.Want)
			}
		})
	}
}

// A receive buffer overflowed: RxDropped and Stats().KernelRxDrops say
// how many datagrams the kernel dropped, as /proc/net/udp does
// (rocetest.CheckKernelDrops), with multishot and single-shot receives;
// afterwards GRO trains still arrive with every control message in the
// slot's control room (rocetest.GROAfterDrops).
func TestKernelRxDrops(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			a, b := loopbackPair(t, p.listen, uring.Options{RecvBuffer: 4096, RxBuffers: 16, Batch: 16,
				GSO: uring.OffloadRequire, GRO: uring.OffloadRequire})
			rocetest.CheckKernelDrops(t, b, lo1, 900, func() uint64 { return rocetest.ProcDrops(t, b.LocalAddrPort()) })
			rocetest.GROAfterDrops(t, a, b)
		})
	}
}

// The same inside a namespace the test creates, on port 4791, without
// GRO.
func TestNetnsKernelRxDrops(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix})
	b := listenIn(t, p.B, p.AddrB, uring.Options{RecvBuffer: 4096, RxBuffers: 16, Batch: 16, GRO: uring.OffloadOff})
	if err := p.B.Do(func() error {
		rocetest.CheckKernelDrops(t, b, p.AddrB, 900, func() uint64 { return rocetest.ProcDrops(t, b.LocalAddrPort()) })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
