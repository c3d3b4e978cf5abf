// Package rocetest holds the test code that the socket-based packet paths
// (packetio/udp, packetio/uring) share for their GSO and GRO tests: it
// builds RoCEv2 transport packets sealed as the engine seals them, sends
// them (whole, or in pieces on a packetio.Gatherer), and checks what
// arrived against the IPv4 Identification each packet's ICRC was right
// for.
package rocetest

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/wire"
)

// Conn is a socket-based packet path: udp.Conn or uring.Conn.
type Conn interface {
	packetio.Conn
	LocalAddrPort() netip.AddrPort
	Offloads() udpsock.OffloadStatus
}

// Packet appends to dst[:0] an RC WRITE MIDDLE packet of n bytes (BTH,
// payload, ICRC; n-16 a multiple of 4) with PSN psn, its ICRC sealed for
// the flow's datagrams with Identification 0, as the engine seals them.
func Packet(t testing.TB, dst []byte, fl *wire.Flow, n, psn int) []byte {
	t.Helper()
	h := wire.Header{Opcode: wire.RCWriteMiddle, PKey: wire.DefaultPKey, DestQP: 0x42, PSN: wire.PSN(psn)}
	payload := make([]byte, n-wire.BTHLen-wire.ICRCLen)
	for i := range payload {
		payload[i] = byte(psn*13 + i)
	}
	b, err := wire.AppendDatagram(dst[:0], fl, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n {
		t.Fatalf("built %d bytes, want %d", len(b), n)
	}
	return b
}

// InPieces turns the whole transport packet in p.Buf into the pieces a
// sender that leaves payloads where they lie gives Transmit: Buf the
// headers, then the pad and ICRC; Ext a copy of the payload elsewhere in
// memory, inserted at ExtAt.
func InPieces(t testing.TB, p *packetio.Packet) {
	t.Helper()
	hl := wire.Opcode(p.Buf[0]).Info().HeaderLen
	end := len(p.Buf) - wire.ICRCLen - int(wire.BTH(p.Buf).PadCount())
	if hl == 0 || end < hl {
		t.Fatalf("not a transport packet: % x", p.Buf)
	}
	p.Ext = bytes.Clone(p.Buf[hl:end])
	p.ExtAt = hl
	p.Buf = append(p.Buf[:hl], p.Buf[hl+len(p.Ext):]...)
}

// Send transmits packets of the given sizes (Packet, PSN i for the i-th)
// from a to dst:dstPort in one batch and returns copies of them as sealed
// (Identification 0). It fails the test unless all are sent.
func Send(t testing.TB, a Conn, dst netip.Addr, dstPort uint16, sizes []int) [][]byte {
	t.Helper()
	return SendPieces(t, a, dst, dstPort, sizes, false)
}

// SendPieces is Send that, with pieces, gives every other packet (the
// first, third, ...) to Transmit in pieces (InPieces): a must then be a
// packetio.Gatherer.
func SendPieces(t testing.TB, a Conn, dst netip.Addr, dstPort uint16, sizes []int, pieces bool) [][]byte {
	t.Helper()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: dst, SrcPort: a.LocalAddrPort().Port(), DstPort: dstPort}
	batch := a.TxBatch(len(sizes))
	if len(batch) != len(sizes) {
		t.Fatalf("TxBatch(%d) lent %d", len(sizes), len(batch))
	}
	sent := make([][]byte, len(sizes))
	for i, n := range sizes {
		batch[i].Buf = Packet(t, batch[i].Buf, &fl, n, i)
		batch[i].Addr = dst
		sent[i] = bytes.Clone(batch[i].Buf)
		if pieces && i%2 == 0 {
			InPieces(t, &batch[i])
		}
	}
	if n, err := a.Transmit(batch); n != len(sizes) || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	return sent
}

// CheckIDs checks that each received packet is the one sent but for its
// ICRC, which is right for the flow with IPv4 Identification ids[i] and
// DF (the receiver's solver finds exactly that Identification).
func CheckIDs(t testing.TB, got []packetiotest.Received, sent [][]byte, fl wire.Flow, ids []uint16) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("received %d packets, sent %d", len(got), len(sent))
	}
	for i := range got {
		b, s := got[i].Buf, sent[i]
		if !sameButICRC(b, s) {
			t.Fatalf("packet %d: %d bytes, differs from the %d sent", i, len(b), len(s))
		}
		id, df, err := fl.CheckDatagramICRC(b)
		if err != nil || id != ids[i] || !df {
			t.Errorf("packet %d (%d bytes): ICRC for Identification %d DF %v (%v), want %d with DF", i, len(b), id, df, err, ids[i])
		}
	}
}

// CheckTrains checks received packets against those sent: each the one
// sent but for its ICRC, whose Identification is the first of its GRO
// train's plus its position there (GROSeg), and returns how many trains
// (packets with GROSeg 0) there were.
func CheckTrains(t testing.TB, got []packetiotest.Received, sent [][]byte, fl wire.Flow) (trains int) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("received %d packets, sent %d", len(got), len(sent))
	}
	var base uint16
	for i, p := range got {
		id, df, err := fl.CheckDatagramICRC(p.Buf)
		if err != nil || !df {
			t.Fatalf("packet %d: %v, DF %v", i, err, df)
		}
		if p.GROSeg == 0 {
			base = id
			trains++
		} else if id != base+p.GROSeg {
			t.Errorf("packet %d at position %d of a train from Identification %d has Identification %d", i, p.GROSeg, base, id)
		}
		if s := sent[i]; !sameButICRC(p.Buf, s) {
			t.Fatalf("packet %d: %d bytes, differs from the %d sent", i, len(p.Buf), len(s))
		}
	}
	return trains
}

// sameButICRC reports whether packets a and b have one length and the
// same bytes before their ICRCs.
func sameButICRC(a, b []byte) bool {
	return len(a) == len(b) && len(a) >= wire.ICRCLen && bytes.Equal(a[:len(a)-wire.ICRCLen], b[:len(b)-wire.ICRCLen])
}

// Seq returns the Identifications of GSO messages of the given segment
// counts: 0..n-1 for each.
func Seq(counts ...int) []uint16 {
	var ids []uint16
	for _, n := range counts {
		for k := range n {
			ids = append(ids, uint16(k))
		}
	}
	return ids
}

// Repeat returns n sizes of size, then more.
func Repeat(n, size int, more ...int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = size
	}
	return append(s, more...)
}

// SetFeatures turns the named offload features of the veth in ns on or
// off (netns.NS.SetFeatures), failing the test if it cannot.
func SetFeatures(t testing.TB, ns *netns.NS, features map[string]bool) {
	t.Helper()
	if err := ns.SetFeatures(netns.LinkName, features); err != nil {
		t.Fatalf("ethtool -K %s %v: %v", netns.LinkName, features, err)
	}
}
