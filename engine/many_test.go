package engine

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestManyQPsAndSRQ runs 64 RC QPs on one engine, 8 of them taking their
// receives from one SRQ.
func TestManyQPsAndSRQ(t *testing.T) {
	l := newLink(t)
	const nqp = 64
	pdA, pdB := l.a.AllocPD(), l.b.AllocPD()
	bufA, bufB := make([]byte, nqp*4096), make([]byte, nqp*4096)
	fill(bufA, 9)
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	mrA, _ := l.a.MRs.Register(bufA, all, pdA)
	mrB, _ := l.b.MRs.Register(bufB, all, pdB)
	cqA, cqB := NewCQ(1024), NewCQ(1024)
	srq := l.b.NewSRQ(pdB, 64, 1)
	var as, bs []*side
	for i := 0; i < nqp; i++ {
		sa := &side{e: l.a, pd: pdA, scq: cqA, rcq: cqA, mr: mrA, buf: bufA}
		sb := &side{e: l.b, pd: pdB, scq: cqB, rcq: cqB, mr: mrB, buf: bufB}
		var err error
		sa.qp, err = l.a.CreateQP(&QPInit{Type: verbs.QPTRC, PD: pdA, SendCQ: cqA, RecvCQ: cqA, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
		must(t, err)
		init := &QPInit{Type: verbs.QPTRC, PD: pdB, SendCQ: cqB, RecvCQ: cqB, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}
		if i < 8 {
			init.SRQ = srq
		}
		sb.qp, err = l.b.CreateQP(init)
		must(t, err)
		connectRC(t, sa, sb, verbs.MTU1024)
		as, bs = append(as, sa), append(bs, sb)
	}
	var srqWRs []verbs.RecvWR
	for i := 0; i < 8; i++ {
		srqWRs = append(srqWRs, verbs.RecvWR{WRID: uint64(1000 + i), SGList: bs[0].sge(i*4096, 4096)})
	}
	_, err := srq.PostRecv(srqWRs)
	must(t, err)
	for i := 8; i < nqp; i++ {
		_, err := bs[i].qp.PostRecv([]verbs.RecvWR{{WRID: uint64(1000 + i), SGList: bs[i].sge(i*4096, 4096)}})
		must(t, err)
	}
	for i := 0; i < nqp; i++ {
		_, err := as[i].qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: as[i].sge(i*4096, 1000+i)}})
		must(t, err)
	}
	recv := collect(l, t, cqB, nqp)
	sent := collect(l, t, cqA, nqp)
	if len(sent) != nqp {
		t.Fatalf("%d send completions", len(sent))
	}
	byQP := map[uint32]verbs.WC{}
	for _, w := range recv {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("%+v", w)
		}
		byQP[w.QPNum] = w
	}
	for i, s := range bs {
		w, ok := byQP[s.qp.Num()]
		if !ok || w.ByteLen != uint32(1000+i) {
			t.Fatalf("QP %d: %+v", i, w)
		}
		off := i * 4096
		if i < 8 { // SRQ buffers are used in the order receives arrive
			off = int(w.WRID-1000) * 4096
		}
		if !bytes.Equal(bufB[off:off+1000+i], bufA[i*4096:i*4096+1000+i]) {
			t.Fatalf("QP %d: data differs", i)
		}
	}
}
