//go:build linux

package uring_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/wire"
)

// The contract suite between two namespaces over veth, on port 4791, with
// an MTU that carries MaxPacket.
func TestNetnsConformance(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix, MTU: 9000})
	packetiotest.Run(t, func(t *testing.T) (packetio.Conn, packetio.Conn) {
		return listenIn(t, p.A, p.AddrA, noGSO()), listenIn(t, p.B, p.AddrB, noGSO())
	})
}

func TestNetnsBatches(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix})
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())
	if a.LocalAddrPort().Port() != wire.RoCEv2Port {
		t.Fatalf("default port %d, want %d", a.LocalAddrPort().Port(), wire.RoCEv2Port)
	}
	for round := range 4 {
		packetiotest.Send(t, a, b, round*32, 32, 1024)
		got := packetiotest.Recv(t, b, 32, 5*time.Second)
		packetiotest.Check(t, got, a, b, round*32, 1024)
		packetiotest.Send(t, b, a, round*32, 32, 1400)
		packetiotest.Check(t, packetiotest.Recv(t, a, 32, 5*time.Second), b, a, round*32, 1400)
		if got[0].Port != wire.RoCEv2Port {
			t.Fatalf("source port %d, want 4791", got[0].Port)
		}
	}
}

// A packet larger than the path MTU is refused with EMSGSIZE (DF: no
// fragmentation), reported for that packet only; the others of the batch
// go, and the Conn keeps working.
func TestNetnsEMSGSIZE(t *testing.T) {
	p := netns.NewPair(t, netns.Options{Prefix: netnsPrefix, MTU: 1500})
	a := listenIn(t, p.A, p.AddrA, noGSO())
	b := listenIn(t, p.B, p.AddrB, noGSO())
	const fits = 1500 - 20 - 8
	sizes := []int{100, fits + 1, 100, fits, 4000}
	batch := a.TxBatch(len(sizes))
	for i, n := range sizes {
		batch[i].Buf = append(batch[i].Buf[:0], bytes.Repeat([]byte{byte(i)}, n)...)
		batch[i].Addr = p.AddrB
	}
	n, err := a.Transmit(batch)
	var te *packetio.TransmitError
	if n != 3 || !errors.As(err, &te) || te.Index != 1 || te.Failed != 2 || te.Addr != p.AddrB || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("Transmit = %d, %v; want 3 sent and EMSGSIZE for packets 1 and 4", n, err)
	}
	got := packetiotest.Recv(t, b, 3, 5*time.Second)
	for i, want := range []int{0, 2, 3} {
		if len(got[i].Buf) != sizes[want] || got[i].Buf[0] != byte(want) {
			t.Errorf("packet %d: %d bytes of %d, want packet %d", i, len(got[i].Buf), got[i].Buf[0], want)
		}
	}
	if s := a.Stats(); s.TxErrors != 2 || s.PacketsOut != 3 {
		t.Errorf("stats %+v", s)
	}
	packetiotest.Send(t, a, b, 0, 32, 64)
	packetiotest.Recv(t, b, 32, 5*time.Second)
}
