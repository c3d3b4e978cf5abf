package rocetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/packetiotest"
	"github.com/goroce/goroce/wire"
)

// The GSO and GRO tests that read the same on both socket-based paths,
// each run on a pair of Conns on loopback opened by the calling package
// with the offloads it asks for.

// GSOLoopback sends from a (GSO required, Batch 128 or more) to b (GRO
// off, so that the kernel cuts each message it gets whole on loopback)
// batches that go out as GSO messages of runs of equal-sized packets (the
// last of a run may be shorter), at most 64 segments and 65507 bytes
// each, one batch handed to the kernel each Transmit. b gets one datagram
// per packet, segment k of each message with its ICRC rewritten for IPv4
// Identification k, which is what the kernel wrote (the ICRC check solves
// for the Identification and finds k). With gather (a is a
// packetio.Gatherer) each batch is sent again with every other packet in
// pieces, subtests named .../pieces=false and .../pieces=true.
func GSOLoopback(t *testing.T, a, b Conn, gather bool) {
	tests := []struct {
		name         string
		sizes        []int
		ids          []uint16
		msgs, single int // GSO messages, and packets sent alone
	}{
		{"15x4112", Repeat(15, 4112), Seq(15), 1, 0},
		{"62x1040", Repeat(62, 1040), Seq(62), 1, 0},
		{"shorter last", Repeat(5, 1040, 528), Seq(6), 1, 0},
		{"70x1040: 62 fill 65507 bytes", Repeat(70, 1040), Seq(62, 8), 2, 0},
		{"65x256: 64 segments at most", Repeat(65, 256), Seq(64, 1), 1, 1},
		{"mixed sizes", []int{1040, 1040, 2000, 2000, 2000, 100, 1040, 64}, Seq(2, 4, 2), 3, 0},
		{"alone", []int{1040, 2000, 4112}, Seq(1, 1, 1), 0, 3},
	}
	if o := a.Offloads(); !o.GSO {
		t.Fatalf("GSO off: %v", o)
	}
	port := b.LocalAddrPort().Port()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: port}
	pieces := []bool{false}
	if gather {
		pieces = append(pieces, true)
	}
	for _, tt := range tests {
		for _, inPieces := range pieces {
			name := tt.name
			if gather {
				name = fmt.Sprintf("%s/pieces=%v", tt.name, inPieces)
			}
			t.Run(name, func(t *testing.T) {
				before := a.Stats()
				sent := SendPieces(t, a, b.LocalAddr(), port, tt.sizes, inPieces)
				got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
				CheckIDs(t, got, sent, fl, tt.ids)
				s := a.Stats()
				msgs, segs := s.GSOMessages-before.GSOMessages, s.GSOSegments-before.GSOSegments
				batches := s.TxBatches - before.TxBatches
				if msgs != uint64(tt.msgs) || segs != uint64(len(tt.sizes)-tt.single) || s.GSOFallbacks != 0 || batches != 1 {
					t.Errorf("GSO messages %d segments %d fallbacks %d batches %d; want %d, %d, 0, 1", msgs, segs, s.GSOFallbacks,
						batches, tt.msgs, len(tt.sizes)-tt.single)
				}
			})
		}
	}
}

// GROLoopback sends from a (GSO required) to b (GRO required, Batch 128
// or more) two GSO messages, which reach b whole on loopback: Receive
// splits each into its packets, slices of one buffer, each with its
// position in the train, which gives its Identification, and with the
// train's address, ports, receive time and TOS.
func GROLoopback(t *testing.T, a, b Conn) {
	if o := b.Offloads(); !o.GRO {
		t.Fatalf("GRO off: %v", o)
	}
	port := b.LocalAddrPort().Port()
	src := a.LocalAddrPort().Port()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: src, DstPort: port}
	sizes := append(Repeat(15, 4112, 1040), Repeat(3, 1040)...) // 16 in one message, 3 in another
	sent := Send(t, a, b.LocalAddr(), port, sizes)
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	if trains := CheckTrains(t, got, sent, fl); trains != 2 {
		t.Errorf("%d trains, want 2", trains)
	}
	for i, g := range got {
		if g.Addr != a.LocalAddr() || g.Port != src || g.Local != b.LocalAddr() || g.RxTime == 0 {
			t.Errorf("packet %d: from %v:%d to %v at %d", i, g.Addr, g.Port, g.Local, g.RxTime)
		}
		if first := got[i-int(g.GROSeg)]; g.RxTime != first.RxTime || g.TOS != first.TOS {
			t.Errorf("packet %d: RxTime %d TOS %#x differ from its train's first's", i, g.RxTime, g.TOS)
		}
	}
	if s := b.Stats(); s.GROBuffers != 2 || s.GROSegments != uint64(len(sent)) || s.PacketsIn != uint64(len(sent)) || s.RxDrops != 0 {
		t.Errorf("receiver stats %+v, want 2 GRO buffers of %d segments", s, len(sent))
	}
}

// GROSingles sends from a (GSO off) to b (GRO required) datagrams one by
// one, which b receives as without GRO: each with Identification 0, no
// GRO buffer counted.
func GROSingles(t *testing.T, a, b Conn) {
	port := b.LocalAddrPort().Port()
	sent := Send(t, a, b.LocalAddr(), port, Repeat(8, 1040))
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: port}
	CheckIDs(t, got, sent, fl, make([]uint16, len(sent)))
	if s := b.Stats(); s.GROBuffers != 0 {
		t.Errorf("stats %+v", s)
	}
}

// GSOTxBatch checks TxBatch and Transmit of a (opened with Batch 8, GRO
// off, and GSO required when gso, off when not) sending to b. With GSO on,
// TxBatch lends lend packets, whole GSO messages' (a multiple of
// wire.GSOMaxSegments), even with the smaller Batch, and they leave as that
// many GSO messages, in one batch, segment k of each with Identification
// k; with GSO off it lends Batch, Offloads says why GSO is off, and every
// datagram leaves alone with Identification 0. Either way the batch is
// handed to the kernel at once.
func GSOTxBatch(t *testing.T, a, b Conn, gso bool, lend int) {
	want := 8
	if gso {
		want = lend
	}
	if got := len(a.TxBatch(1000)); got != want {
		t.Fatalf("GSO %v: TxBatch(1000) lent %d, want %d", gso, got, want)
	}
	port := b.LocalAddrPort().Port()
	fl := wire.Flow{Src: a.LocalAddr(), Dst: b.LocalAddr(), SrcPort: a.LocalAddrPort().Port(), DstPort: port}
	sent := Send(t, a, b.LocalAddr(), port, Repeat(want, 256))
	got := packetiotest.Recv(t, b, len(sent), 5*time.Second)
	s := a.Stats()
	if gso {
		msgs := want / wire.GSOMaxSegments
		var segs []int
		for range msgs {
			segs = append(segs, wire.GSOMaxSegments)
		}
		CheckIDs(t, got, sent, fl, Seq(segs...))
		if s.GSOMessages != uint64(msgs) || s.GSOSegments != uint64(want) || s.TxBatches != 1 {
			t.Errorf("GSO on: stats %+v, want %d GSO messages of %d packets in one batch", s, msgs, wire.GSOMaxSegments)
		}
		return
	}
	CheckIDs(t, got, sent, fl, make([]uint16, len(sent)))
	if o := a.Offloads(); o.GSO || o.GSOReason == "" {
		t.Errorf("Offloads = %+v, want GSO off with a reason", o)
	}
	if s.GSOMessages != 0 || s.TxBatches != 1 {
		t.Errorf("GSO off: stats %+v, want no GSO message, one batch", s)
	}
}
