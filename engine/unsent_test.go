package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestUnsent: QP.Unsent counts the packets of the posted WRs not yet sent,
// as their number times the packets of the last one, and falls as they
// leave.
func TestUnsent(t *testing.T) {
	l := newLink(t)
	a, b := newSide(t, l.a, verbs.QPTRC, 1<<16), newSide(t, l.b, verbs.QPTRC, 1<<16)
	connectRC(t, a, b, verbs.MTU1024)
	if n := a.qp.Unsent(); n != 0 {
		t.Fatalf("idle QP: Unsent %d", n)
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 2500), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	_, err := a.qp.PostSend([]verbs.SendWR{wr, wr, wr})
	must(t, err)
	if n := a.qp.Unsent(); n != 9 {
		t.Fatalf("three 2500-byte WRITEs at MTU 1024: Unsent %d, want 9", n)
	}
	buf := make([]byte, 2048)
	for range 3 { // the first WRITE's three packets
		if _, _, _, ok := l.a.OutputFrom(l.now, buf); !ok {
			t.Fatal("no packet to send")
		}
	}
	if n := a.qp.Unsent(); n != 6 {
		t.Fatalf("after the first WRITE's packets: Unsent %d, want 6", n)
	}
	for l.step() {
	}
	if n := a.qp.Unsent(); n != 0 {
		t.Fatalf("after all were sent: Unsent %d, want 0", n)
	}
}
