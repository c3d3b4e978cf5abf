package soft

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

// end is one side of a connection through the verbs API.
type end struct {
	dev *Device
	ctx verbs.Context
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
	buf []byte
}

func newEnd(t testing.TB, d *Device, typ verbs.QPType, size int) *end {
	e := &end{dev: d, buf: make([]byte, size)}
	var err error
	e.ctx, err = d.Open()
	must(t, err)
	e.pd, err = e.ctx.AllocPD()
	must(t, err)
	e.cq, err = e.ctx.CreateCQ(1024, nil)
	must(t, err)
	e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	must(t, err)
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2}})
	must(t, err)
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func connect(t testing.TB, a, b *end) { connectTimeout(t, a, b, 14) }

// wait polls cq until n completions arrived or 10 s passed.
func wait(t *testing.T, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	var got []verbs.WC
	wc := make([]verbs.WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		k := cq.Poll(wc)
		got = append(got, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after 10 s: %+v", len(got), n, got)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return got
}

func pipeDevices(t *testing.T) (*Device, *Device) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	a, err := New(Options{Name: "softa", Conn: ca})
	must(t, err)
	b, err := New(Options{Name: "softb", Conn: cb})
	must(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestSoftRCOverPipe(t *testing.T) {
	da, db := pipeDevices(t)
	a, b := newEnd(t, da, verbs.QPTRC, 1<<20), newEnd(t, db, verbs.QPTRC, 1<<20)
	connect(t, a, b)
	for i := range a.buf {
		a.buf[i] = byte(i * 13)
	}
	sge := func(e *end, off, n int) []verbs.SGE {
		return []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
	}
	_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 50, SGList: sge(b, 0, 100000)}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge(a, 0, 100000)},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sge(a, 0, 300000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: sge(a, 600000, 300000), RemoteAddr: b.mr.Addr() + 200000, RKey: b.mr.RKey()},
		{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: sge(a, 999000, 8), RemoteAddr: b.mr.Addr() + 150000, RKey: b.mr.RKey(), CompareAdd: 3},
	})
	must(t, err)
	wcs := wait(t, a.cq, 4)
	ops := []verbs.WCOpcode{verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCFetchAdd}
	for i, w := range wcs {
		if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess || w.Opcode != ops[i] {
			t.Fatalf("WC %d: %+v", i, w)
		}
	}
	rw := wait(t, b.cq, 1)
	if rw[0].WRID != 50 || rw[0].ByteLen != 100000 || rw[0].Opcode != verbs.WCRecv {
		t.Fatalf("recv %+v", rw[0])
	}
	if !bytes.Equal(b.buf[:100000], a.buf[:100000]) || !bytes.Equal(b.buf[200000:500000], a.buf[:300000]) ||
		!bytes.Equal(a.buf[600000:900000], a.buf[:300000]) {
		t.Fatal("data differs")
	}
}

func TestSoftCompletionChannel(t *testing.T) {
	da, db := pipeDevices(t)
	a, b := newEnd(t, da, verbs.QPTRC, 4096), newEnd(t, db, verbs.QPTRC, 4096)
	ch, err := b.ctx.CreateCompChannel()
	must(t, err)
	cq, err := b.ctx.CreateCQ(16, ch)
	must(t, err)
	b.qp, err = b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	connect(t, a, b)
	must(t, cq.ReqNotify(false))
	_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: []verbs.SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}})
	must(t, err)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}}})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := ch.Wait(ctx)
	must(t, err)
	if got != cq {
		t.Fatal("event for another CQ")
	}
	if w := wait(t, cq, 1); w[0].WRID != 9 {
		t.Fatalf("%+v", w)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := ch.Wait(ctx2); err == nil {
		t.Fatal("event without an armed CQ")
	}
}

// TestCloseFlushes: closing a device completes its outstanding work with
// WR_FLUSH_ERR, in order (a SEND stuck in RNR retries because the peer has
// no receive posted, a WRITE behind it, a posted receive), and refuses
// later posts.
func TestCloseFlushes(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), pipe.Options{})
	da, err := New(Options{Name: "closea", Conn: ca})
	must(t, err)
	db, err := New(Options{Name: "closeb", Conn: cb})
	must(t, err)
	defer db.Close()
	a, b := newEnd(t, da, verbs.QPTRC, 4096), newEnd(t, db, verbs.QPTRC, 4096)
	connect(t, a, b)
	sge := []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}
	if _, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: sge}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sge},
		{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sge, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the SEND meets an RNR NAK and waits to retry
	if err := da.Close(); err != nil {
		t.Fatal(err)
	}
	got := wait(t, a.cq, 3)
	want := map[uint64]verbs.WCOpcode{1: verbs.WCRecv, 2: verbs.WCSend, 3: verbs.WCRDMAWrite}
	var sends []uint64
	for _, w := range got {
		if w.Status != verbs.WCWRFlushErr || w.Opcode != want[w.WRID] {
			t.Errorf("completion %+v, want WR_FLUSH_ERR for WR %d (%v)", w, w.WRID, want[w.WRID])
		}
		if w.WRID != 1 {
			sends = append(sends, w.WRID)
		}
	}
	if len(sends) != 2 || sends[0] != 2 || sends[1] != 3 {
		t.Errorf("send completions in order %v, want [2 3]", sends)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRSend, SGList: sge}}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("post after Close: %v, want ErrDestroyed", err)
	}
	if _, err := a.qp.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: sge}}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("receive after Close: %v, want ErrDestroyed", err)
	}
}
