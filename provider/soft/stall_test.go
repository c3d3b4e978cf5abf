//go:build linux

package soft

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// stallConn is a packet path whose first Receive that gets packets after
// arm keeps them, sleeps for stall and returns none, as a driver goroutine
// descheduled right after a poll while an ACK waited in its socket (a busy
// host). The next Receive returns what it kept.
type stallConn struct {
	packetio.Conn
	stall time.Duration
	armed atomic.Bool
	fired atomic.Bool
	kept  []packetio.Packet
}

func (c *stallConn) Receive(until time.Time) ([]packetio.Packet, error) {
	if len(c.kept) > 0 {
		kept := c.kept
		c.kept = nil
		return kept, nil
	}
	pkts, err := c.Conn.Receive(until)
	if err != nil || len(pkts) == 0 || !c.armed.Load() {
		return pkts, err
	}
	c.armed.Store(false)
	for _, p := range pkts {
		p.Buf = append([]byte(nil), p.Buf...)
		c.kept = append(c.kept, p)
	}
	time.Sleep(c.stall)
	c.fired.Store(true)
	return nil, nil
}

// TestStalledDriverTakesACKFirst: a driver descheduled past its QP's local
// ACK timer while the ACK waited in its socket takes that ACK in before it
// runs the timers: no timeout, no probe, no packet sent again, and no retry
// used up. Running the timers first, as the
// driver did, counted a retry for a packet that was acknowledged; on a
// 2-core machine running five soft devices and more, all 16 QPs of an
// incast's sender died so of RETRY_EXC_ERR.
func TestStalledDriverTakesACKFirst(t *testing.T) {
	ca, err := udp.Listen(netip.MustParseAddr("127.0.31.1"), udp.Options{})
	e2eMust(t, err)
	cb, err := udp.Listen(netip.MustParseAddr("127.0.31.2"), udp.Options{})
	if err != nil {
		ca.Close()
		t.Fatal(err)
	}
	sc := &stallConn{Conn: ca, stall: 250 * time.Millisecond} // the local ACK timer: 67 ms
	// NoInline: only the driver receives (a Poll that found its CQ empty
	// would take the ACK in itself). No congestion control, so no tail
	// loss probe: its timer (1 ms at least) could pass before a slow
	// run's ACK came at all, and fire rightly; the local ACK timer's 67 ms
	// cannot.
	da, err := New(Options{Name: "stalla", Conn: sc, NoInline: true, Engine: engine.Config{Congestion: engine.CCOff}})
	if err != nil {
		ca.Close()
		cb.Close()
		t.Fatal(err)
	}
	defer da.Close()
	db, err := New(Options{Name: "stallb", Conn: cb})
	if err != nil {
		cb.Close()
		t.Fatal(err)
	}
	defer db.Close()
	ra, rb := e2eNewRes(t, da, 4096), e2eNewRes(t, db, 4096)
	cqa, cqb := ra.cq(t, 16), rb.cq(t, 16)
	qa, qb := ra.qp(t, verbs.QPTRC, cqa, cqa, nil, 16), rb.qp(t, verbs.QPTRC, cqb, cqb, nil, 16)
	e2eConnect(t, verbs.MTU1024, qa, da, 100, qb, db, 200)
	write := func(id uint64) verbs.WC {
		t.Helper()
		_, err := qa.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: ra.sge(0, 64), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()}})
		e2eMust(t, err)
		w := &e2eCQWant{name: "A's send CQ", cq: cqa, n: 1}
		e2eCollect(t, w)
		return w.got[0]
	}
	write(1) // the connection's first round trip, before the count
	before := da.Stats()
	sc.armed.Store(true)
	if wc := write(2); wc.Status != verbs.WCSuccess {
		t.Fatalf("the WRITE completed with %v", wc.Status)
	}
	if !sc.fired.Load() {
		t.Fatal("the driver's Receive never got the ACK to keep: no stall happened")
	}
	after := da.Stats()
	if d := after.Timeouts - before.Timeouts; d != 0 {
		t.Errorf("%d local ACK timeouts for a WRITE whose ACK had come", d)
	}
	if d := after.TailProbes - before.TailProbes; d != 0 {
		t.Errorf("%d tail loss probes for a WRITE whose ACK had come", d)
	}
	if d := after.Retransmits - before.Retransmits; d != 0 {
		t.Errorf("%d packets sent again", d)
	}
}
