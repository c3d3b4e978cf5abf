package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// gatherStats counts what stepGather moved.
type gatherStats struct {
	packets, gathered int
	// sizes of the payloads sent from where they lie
	extBytes int
}

// stepGather is step for a link whose engines output through OutputGather,
// as a driver over a packet path that sends a payload from where it lies
// (packetio.Gatherer) does: each packet made of its pieces is joined into
// one datagram, checked, and input. A packet whose pieces do not join into
// what OutputFrom would have sent (an ICRC not that of the joined bytes, a
// payload that is not GatherMin bytes of an MR) panics.
func (l *link) stepGather() bool {
	moved := false
	joined := make([]byte, 0, wire.MaxPMTU+128)
	for _, pair := range [2][2]*Engine{{l.a, l.b}, {l.b, l.a}} {
		from, to := pair[0], pair[1]
		for {
			n, ext, dst, sport, ok := from.OutputGather(l.now, l.buf)
			if !ok {
				break
			}
			moved = true
			l.sent++
			l.gather.packets++
			if dst != to.Local() {
				panic(fmt.Sprintf("packet to %v", dst))
			}
			pkt := l.buf[:n]
			if ext != nil {
				if len(ext) < GatherMin {
					panic(fmt.Sprintf("%d-byte payload left aside", len(ext)))
				}
				at := GatherSplit(l.buf, n)
				joined = append(append(append(joined[:0], l.buf[:at]...), ext...), l.buf[at:n]...)
				pkt = joined
				l.gather.gathered++
				l.gather.extBytes += len(ext)
				// The ICRC is the one the packet joined gets sealed whole.
				c, err := wire.NewFlowICRC(wire.Flow{Src: from.Local(), Dst: dst, SrcPort: sport})
				if err != nil {
					panic(err)
				}
				again := append([]byte(nil), pkt...)
				if err := c.Set(again); err != nil || !bytes.Equal(again, pkt) {
					panic(fmt.Sprintf("a packet sent in pieces: its ICRC is not that of its bytes joined (%v)", err))
				}
			}
			if l.capture != nil {
				l.capture = append(l.capture, captured{append([]byte(nil), pkt...), from.Local(), dst})
			}
			to.Input(l.now, pkt, from.Local(), sport)
		}
	}
	return moved
}

// TestOutputGather: RC SENDs, WRITEs and READs whose packets go out through
// OutputGather, payloads of GatherMin bytes or more left in the memory
// region (WRITE and SEND from one SGE), reach the peer intact: every packet
// passes the receiver's ICRC check, every byte lands, every WQE completes;
// shorter payloads, several SGEs, inline data and READ responses (whose
// memory the responder may write meanwhile) are copied as before.
func TestOutputGather(t *testing.T) {
	l := newLink(t)
	l.gather = new(gatherStats)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<18), newSide(t, l.b, verbs.QPTRC, 1<<18)
	connectRC(t, a, b, verbs.MTU4096)
	for i := range a.buf {
		a.buf[i] = byte(i*7 + i>>8)
	}
	for i := range b.buf {
		b.buf[i] = byte(i*13 + 1)
	}
	// name, request, bytes: a's [0, 128 KiB) go to b's [0, 128 KiB)
	// by WRITEs and SENDs; b's [128 KiB, +20000) come to a's by a READ.
	type op struct {
		wr   verbs.SendWR
		recv bool // a SEND: b posts a receive for it
	}
	var ops []op
	off := 0
	add := func(opc verbs.WROpcode, sg []verbs.SGE, n int, flags verbs.SendFlags) {
		w := verbs.SendWR{WRID: uint64(len(ops)), Opcode: opc, Flags: verbs.SendSignaled | flags, SGList: sg}
		if opc == verbs.WRRDMAWrite {
			w.RemoteAddr, w.RKey = b.mr.Addr()+uint64(off), b.mr.RKey()
		}
		ops = append(ops, op{w, opc == verbs.WRSend})
		off += n
	}
	for _, n := range []int{65536, 1000, 1024, 1026, 4097, 4095, 12000} {
		add(verbs.WRRDMAWrite, a.sge(off, n), n, 0)
	}
	add(verbs.WRRDMAWrite, append(a.sge(off, 1500), a.sge(off+1500, 1600)...), 3100, 0) // two SGEs
	add(verbs.WRRDMAWrite, a.sge(off, 200), 200, verbs.SendInline)
	for _, n := range []int{5000, 4096, 1023} {
		add(verbs.WRSend, a.sge(off, n), n, 0)
	}
	sendAt := 0 // where SENDs land in b: after the WRITEs' bytes
	for _, o := range ops {
		if !o.recv {
			sendAt += int(o.wr.SGList[0].Length)
			if len(o.wr.SGList) > 1 {
				sendAt += int(o.wr.SGList[1].Length)
			}
		}
	}
	recvAt := sendAt
	for _, o := range ops {
		if o.recv {
			n := int(o.wr.SGList[0].Length)
			_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(recvAt), SGList: b.sge(recvAt, n)}})
			must(t, err)
			recvAt += n
		}
	}
	const readAt, readLen = 128 << 10, 20000
	ops = append(ops, op{wr: verbs.SendWR{WRID: uint64(len(ops)), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: a.sge(readAt, readLen), RemoteAddr: b.mr.Addr() + readAt, RKey: b.mr.RKey()}})
	for _, o := range ops {
		_, err := a.qp.PostSend([]verbs.SendWR{o.wr})
		must(t, err)
	}
	wcs := collect(l, t, a.scq, len(ops))
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("WQE %d: %v", wc.WRID, wc.Status)
		}
	}
	collect(l, t, b.rcq, 3)
	if !bytes.Equal(b.buf[:recvAt], a.buf[:recvAt]) {
		t.Error("the WRITEs' and SENDs' bytes differ at the responder")
	}
	if !bytes.Equal(a.buf[readAt:readAt+readLen], b.buf[readAt:readAt+readLen]) {
		t.Error("the READ's bytes differ at the requester")
	}
	for _, e := range []*Engine{l.a, l.b} {
		if st := e.Stats(); st.ICRCDrops != 0 || st.MalformedDrops != 0 {
			t.Errorf("%v: %+v", e.Local(), st)
		}
	}
	if got := l.a.Stats().TxGathered + l.b.Stats().TxGathered; got != uint64(l.gather.gathered) {
		t.Errorf("Stats.TxGathered %d, %d packets sent in pieces", got, l.gather.gathered)
	}
	g := l.gather
	// In pieces: the WRITEs' 16 + 1 (1024) + 1 (1026) + 1 (4097's first)
	// + 1 (4095) + 3 (12000: 4096, 4096, 3808) packets, the SENDs' 2
	// (5000's first, 4096); none of the READ's 5 responses.
	want := 16 + 1 + 1 + 1 + 1 + 3 + 2
	wantBytes := 65536 + 1024 + 1026 + 4096 + 4095 + 12000 + 4096 + 4096
	if g.gathered != want || g.extBytes != wantBytes {
		t.Errorf("%d of %d packets in pieces, %d payload bytes; want %d, %d bytes", g.gathered, g.packets, g.extBytes, want, wantBytes)
	}
}
