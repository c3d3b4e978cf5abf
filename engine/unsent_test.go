package engine

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestUnsent: QP.Unsent counts the posted WRs not yet sent and their
// packets, as their number times the packets of the last one, and falls as they
// leave.
func TestUnsent(t *testing.T) {
	l, a, b := rcLink(t)
	if w, n := a.qp.Unsent(); w != 0 || n != 0 {
		t.Fatalf("idle QP: Unsent %d, %d", w, n)
	}
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 2500), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	_, err := a.qp.PostSend([]verbs.SendWR{wr, wr, wr})
	must(t, err)
	if w, n := a.qp.Unsent(); w != 3 || n != 9 {
		t.Fatalf("three 2500-byte WRITEs at MTU 1024: Unsent %d, %d, want 3, 9", w, n)
	}
	buf := make([]byte, 2048)
	for range 3 { // the first WRITE's three packets
		if _, _, _, ok := l.a.OutputFrom(l.now, buf); !ok {
			t.Fatal("no packet to send")
		}
	}
	if w, n := a.qp.Unsent(); w != 2 || n != 6 {
		t.Fatalf("after the first WRITE's packets: Unsent %d, %d, want 2, 6", w, n)
	}
	for l.step() {
	}
	if w, n := a.qp.Unsent(); w != 0 || n != 0 {
		t.Fatalf("after all were sent: Unsent %d, %d, want 0, 0", w, n)
	}
}
