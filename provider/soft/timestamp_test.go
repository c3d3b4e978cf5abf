//go:build linux

package soft

import (
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// udPair is a UD QP on each of two devices, in RTS, with an AH from a to b.
type udPair struct {
	a, b *end
	ah   verbs.AH
}

const tsQKey = 0x11111111

func newUDPair(t *testing.T, da, db *Device) *udPair {
	t.Helper()
	p := &udPair{a: newEnd(t, da, verbs.QPTUD, 1<<16), b: newEnd(t, db, verbs.QPTUD, 1<<16)}
	for _, e := range []*end{p.a, p.b} {
		e2eUDToRTS(t, e.qp, tsQKey, 0)
	}
	var err error
	p.ah, err = p.a.pd.CreateAH(&verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: db.GID(), PortNum: 1})
	must(t, err)
	t.Cleanup(func() { p.ah.Destroy() })
	return p
}

// send posts one signaled UD SEND of n bytes from a to b.
func (p *udPair) send(t *testing.T, wrid uint64, n uint32) {
	t.Helper()
	_, err := p.a.qp.PostSend([]verbs.SendWR{{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: p.a.mr.Addr(), Length: n, LKey: p.a.mr.LKey()}}, AH: p.ah,
		RemoteQPN: p.b.qp.Num(), RemoteQKey: tsQKey}})
	must(t, err)
}

func (p *udPair) recv(t *testing.T, wrid uint64) {
	t.Helper()
	_, err := p.b.qp.PostRecv([]verbs.RecvWR{{WRID: wrid, SGList: []verbs.SGE{{Addr: p.b.mr.Addr(), Length: 1024, LKey: p.b.mr.LKey()}}}})
	must(t, err)
}

// TestCompletionTimestampStall: a receive completion polled 20 ms after its
// packet arrived carries the time the engine processed the packet, not the
// time of the poll; the send completion too. Over UDP on loopback, driven
// by the device's driver goroutine alone (the test does not poll until the
// stall is over).
func TestCompletionTimestampStall(t *testing.T) {
	da, db := udpLoopDevices(t, engine.Config{})
	attr, err := db.Open()
	must(t, err)
	if a, err := attr.QueryDevice(); err != nil || a.CompletionTimestamps != verbs.TimestampSoftware {
		t.Fatalf("QueryDevice: CompletionTimestamps %v (%v), want software", a.CompletionTimestamps, err)
	}
	p := newUDPair(t, da, db)
	p.recv(t, 7)
	before := db.Stats().RxPackets
	posted := verbs.Now()
	p.send(t, 1, 64)
	// Wait, without polling any CQ, until b's driver took the packet in.
	deadline := time.Now().Add(10 * time.Second)
	for db.Stats().RxPackets == before {
		if time.Now().After(deadline) {
			t.Fatal("the packet did not arrive within 10 s")
		}
		time.Sleep(50 * time.Microsecond)
	}
	arrived := verbs.Now()
	time.Sleep(20 * time.Millisecond) // the application stalls
	polled := verbs.Now()
	r := wait(t, p.b.cq, 1)[0]
	s := wait(t, p.a.cq, 1)[0]
	if r.Status != verbs.WCSuccess || r.Opcode != verbs.WCRecv || r.WRID != 7 {
		t.Fatalf("receive completion %+v", r)
	}
	if r.Timestamp < posted || r.Timestamp > arrived {
		t.Errorf("receive timestamp %d is %v after the post, want within the %v from the post to the arrival",
			r.Timestamp, time.Duration(r.Timestamp-posted), time.Duration(arrived-posted))
	}
	if stall := time.Duration(polled - r.Timestamp); stall < 20*time.Millisecond {
		t.Errorf("the receive timestamp is %v before the poll, want at least the 20 ms stall", stall)
	}
	if s.Status != verbs.WCSuccess || s.Timestamp < posted || s.Timestamp > polled {
		t.Errorf("send completion %+v: timestamp %v after the post, want within %v", s,
			time.Duration(s.Timestamp-posted), time.Duration(polled-posted))
	}
	t.Logf("receive stamped %v after the post, polled %v later", time.Duration(r.Timestamp-posted), time.Duration(polled-r.Timestamp))
}

// TestCompletionTimestampsOrdered: the timestamps of successive completions
// of a CQ never decrease and lie between the post and the poll, for sends,
// receives and RC operations alike; a flushed QP's completions are stamped
// too.
func TestCompletionTimestampsOrdered(t *testing.T) {
	da, db := pipeDevices(t)
	p := newUDPair(t, da, db)
	const n = 100
	for i := range n {
		p.recv(t, uint64(i))
	}
	start := verbs.Now()
	for i := range n {
		p.send(t, uint64(i), uint32(i))
	}
	check := func(what string, wcs []verbs.WC, from, to int64) {
		t.Helper()
		last := from
		for i, w := range wcs {
			if w.Status != verbs.WCSuccess && w.Status != verbs.WCWRFlushErr {
				t.Fatalf("%s completion %d: %+v", what, i, w)
			}
			if w.Timestamp < last || w.Timestamp > to {
				t.Fatalf("%s completion %d: timestamp %d, previous %d, want non-decreasing within [%d, %d]", what, i, w.Timestamp, last, from, to)
			}
			last = w.Timestamp
		}
	}
	recvs := wait(t, p.b.cq, n)
	sends := wait(t, p.a.cq, n)
	check("UD receive", recvs, start, verbs.Now())
	check("UD send", sends, start, verbs.Now())

	// RC: WRITEs and a SEND, then the receives still posted flushed.
	x, y := newEnd(t, da, verbs.QPTRC, 1<<16), newEnd(t, db, verbs.QPTRC, 1<<16)
	connect(t, x, y)
	for i := range 4 {
		_, err := y.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGList: []verbs.SGE{{Addr: y.mr.Addr(), Length: 64, LKey: y.mr.LKey()}}}})
		must(t, err)
	}
	start = verbs.Now()
	for i := range n {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: x.mr.Addr(), Length: 256, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr() + 4096, RKey: y.mr.RKey()}
		if i == n-1 {
			wr.Opcode = verbs.WRSend
			wr.SGList[0].Length = 8
		}
		_, err := x.qp.PostSend([]verbs.SendWR{wr})
		must(t, err)
	}
	check("RC send", wait(t, x.cq, n), start, verbs.Now())
	got := wait(t, y.cq, 1)
	must(t, y.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState))
	got = append(got, wait(t, y.cq, 3)...)
	if got[1].Status != verbs.WCWRFlushErr {
		t.Errorf("after ERROR: %+v, want a flush", got[1])
	}
	check("RC receive and flush", got, start, verbs.Now())
}
