//go:build linux

package soft

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/wire"
)

// TestGSI: QP 1 over a real UDP socket. A MAD sent with SendMAD leaves as
// the UD SEND ONLY rdma_rxe expects (QP 1 to QP 1, Q_Key 0x80010000, PSN
// counting from 0, a good ICRC); a MAD forged by a peer socket reaches the
// handler with its sender; every malformed or foreign QP 1 packet is
// dropped and counted, and reaches no handler.
func TestGSI(t *testing.T) {
	devAddr, peerAddr := netip.MustParseAddr("127.0.9.20"), netip.MustParseAddr("127.0.9.21")
	c, err := udp.Listen(devAddr, udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", devAddr, err)
	}
	dev, err := New(Options{Name: "gsi", Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	defer dev.Close()
	peer, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, wire.RoCEv2Port)))
	if err != nil {
		t.Skipf("UDP socket on %v: %v", peerAddr, err)
	}
	defer peer.Close()

	type got struct {
		mad  []byte
		from netip.Addr
	}
	ch := make(chan got, 16)
	dev.SetGSIHandler(func(mad []byte, from netip.Addr) {
		ch <- got{append([]byte(nil), mad...), from}
	})

	mad := make([]byte, engine.GSIMADSize)
	for i := range mad {
		mad[i] = byte(i)
	}
	// Out: two MADs, PSN 0 and 1.
	for i := range 2 {
		mad[0] = byte(i)
		if err := dev.SendMAD(peerAddr, mad); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Packet
		if err := wire.Parse(buf[:n], &p); err != nil {
			t.Fatal(err)
		}
		fl := wire.Flow{Src: devAddr, Dst: peerAddr, SrcPort: from.Port()}
		if _, _, err := fl.CheckDatagramICRC(buf[:n]); err != nil {
			t.Errorf("ICRC: %v", err)
		}
		b, d := p.BTH(), p.DETH()
		if p.Opcode() != wire.UDSendOnly || b.DestQP() != 1 || b.PSN() != wire.PSN(i) || b.PKey() != 0xFFFF ||
			d == nil || d.QKey() != 0x80010000 || d.SrcQP() != 1 || !bytes.Equal(p.Payload(), mad) {
			t.Fatalf("MAD %d went out as %v dqp %d psn %d", i, p.Opcode(), b.DestQP(), b.PSN())
		}
	}
	if err := dev.SendMAD(peerAddr, mad[:255]); err == nil {
		t.Error("255-byte MAD sent")
	}

	// In.
	forge := func(h wire.Header, payload []byte) {
		t.Helper()
		h.PKey = wire.DefaultPKey
		fl := wire.Flow{Src: peerAddr, Dst: devAddr, SrcPort: wire.RoCEv2Port}
		b, err := wire.AppendDatagram(nil, &fl, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := peer.WriteToUDPAddrPort(b, netip.AddrPortFrom(devAddr, wire.RoCEv2Port)); err != nil {
			t.Fatal(err)
		}
	}
	good := wire.Header{Opcode: wire.UDSendOnly, DestQP: 1, DETH: wire.DETHFields{QKey: engine.GSIQKey, SrcQP: 1}}
	badQKey := good
	badQKey.DETH.QKey = 0x80010001
	rc := wire.Header{Opcode: wire.RCSendOnly, DestQP: 1}
	imm := good
	imm.Opcode = wire.UDSendOnlyImm
	before := dev.GSIStats()
	forge(badQKey, mad)
	forge(good, mad[:200])
	forge(rc, mad)
	forge(imm, mad)
	mad[0] = 0x77
	forge(good, mad)
	select {
	case g := <-ch:
		if g.from != peerAddr || !bytes.Equal(g.mad, mad) {
			t.Fatalf("handler got a MAD from %v: %x", g.from, g.mad[:8])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no MAD reached the handler")
	}
	dev.SetGSIHandler(nil)
	forge(good, mad)
	deadline := time.Now().Add(5 * time.Second)
	var s engine.GSIStats
	for {
		s = dev.GSIStats()
		if s.Drops-before.Drops >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if s.QKeyDrop-before.QKeyDrop != 1 || s.Drops-before.Drops != 4 || s.RxMADs-before.RxMADs != 1 || s.TxMADs != 2 {
		t.Errorf("stats before %+v after %+v", before, s)
	}
	select {
	case g := <-ch:
		t.Fatalf("a dropped packet reached the handler: %x", g.mad[:8])
	default:
	}
}
