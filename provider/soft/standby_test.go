//go:build linux

package soft

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/verbs"
)

// standbyPoll polls cq until it yields a completion or limit passes,
// yielding the processor after every yieldEvery polls: the timers the
// goroutine arms (a Wake of the driver is one) run only when its
// processor schedules, and a driver stands by for as long as the polls
// come less than pollGrace apart.
func standbyPoll(t *testing.T, cq verbs.CQ, limit time.Duration, yieldEvery int) (verbs.WC, bool) {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for i, t0 := 1, time.Now(); time.Since(t0) < limit; i++ {
		if cq.Poll(wc) == 1 {
			return wc[0], true
		}
		if i%yieldEvery == 0 {
			e2eYield()
		}
	}
	return verbs.WC{}, false
}

// standbySigns returns d's engine's count of signs of loss.
func standbySigns(d *Device) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.LossSigns()
}

// TestStandBy: between two namespaces, an application that spins on Poll
// while one 16 MiB WRITE is in flight drives the packet path itself, and
// its device's driver stands by meanwhile; once the polls stop, the
// driver takes the path back and parks. A QP aimed at an address nobody
// holds (standbyTimers), whose application also only polls, still completes in
// RETRY_EXC_ERR about when its timers say, whether the driver or the
// polling application runs them.
func TestStandBy(t *testing.T) {
	netns.Require(t)
	pair := netns.NewPair(t, netns.Options{})
	a := loadDevice(t, pair.A, pair.AddrA, "sba", engine.CCDefault)
	b := loadDevice(t, pair.B, pair.AddrB, "sbb", engine.CCDefault)
	const size = 16 << 20
	ra, rb := e2eNewRes(t, a, size), e2eNewRes(t, b, size)
	e2eFill(ra.buf, 7)
	cq := ra.cq(t, 4)
	qa := ra.qp(t, verbs.QPTRC, cq, cq, nil, 4)
	qb := rb.qp(t, verbs.QPTRC, rb.cq(t, 1), rb.cq(t, 1), nil, 1)
	e2eConnect(t, verbs.MTU1024, qa, a, 0x100, qb, b, 0x200)

	before, signs := a.sb.stoodBy.Load(), standbySigns(a)
	_, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: ra.sge(0, size), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()}})
	e2eMust(t, err)
	wc, ok := standbyPoll(t, cq, 20*time.Second, 1)
	if !ok || wc.Status != verbs.WCSuccess {
		t.Fatalf("the 16 MiB WRITE: completion %v (%+v), want one in success", ok, wc)
	}
	loadSync(a, b)
	e2eSame(t, "the WRITE's destination", rb.buf, ra.buf)
	switch {
	case standbySigns(a) != signs:
		// A tail loss probe on a loaded machine: the driver keeps the
		// path after one (lossHold).
		t.Logf("the engine saw signs of loss during the WRITE: %d", standbySigns(a)-signs)
	case a.sb.stoodBy.Load() == before:
		t.Error("the driver never stood by while the application polled")
	}
	parked := false
	for t0 := time.Now(); !parked && time.Since(t0) < 2*time.Second; time.Sleep(100 * time.Microsecond) {
		parked = a.DriverParked()
	}
	if !parked {
		t.Error("the driver did not take the packet path back and park once the polls stopped")
	}

	// The timers: whether the first one comes while the driver stands by
	// depends on the scheduling of three goroutines on the machine's
	// processors, so up to five tries, each on a fresh device.
	ran := false
	for try := 0; try < 5 && !ran; try++ {
		ran = standbyTimers(t, try)
	}
	if !ran {
		t.Error("in five tries, the polling application never ran the engine's timers while the driver stood by")
	}
}

// standbyTimers: a QP aimed at an address in the link's subnet that
// nobody holds, from a fresh device that controls no congestion (no tail
// loss probe): its packets go nowhere, and only its local ACK timer ends
// its WRITE, in RETRY_EXC_ERR. The timer first expires 4 ms after the
// post, 3 ms after postHold, so the driver may stand by then and the
// polling application run it. It reports whether it did.
func standbyTimers(t *testing.T, try int) bool {
	pair := netns.NewPair(t, netns.Options{})
	c := loadDevice(t, pair.A, pair.AddrA, fmt.Sprint("sbc", try), engine.CCOff)
	rc := e2eNewRes(t, c, 4096)
	cq := rc.cq(t, 4)
	qx := rc.qp(t, verbs.QPTRC, cq, cq, nil, 4)
	vanishRCToRTS(t, qx, 0x123, verbs.GIDFromAddr(pair.AddrB.Next()), 0x300, 10, 2) // ~4 ms x 3
	ticks := c.sb.inlineTicks.Load()
	_, err := qx.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: rc.sge(0, 4096), RemoteAddr: 0x1000, RKey: 0x77}})
	e2eMust(t, err)
	t0 := time.Now()
	wc, ok := standbyPoll(t, cq, 5*time.Second, 16)
	took := time.Since(t0)
	if !ok || wc.WRID != 2 || wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("the WRITE to nobody: completion %v (%+v), want RETRY_EXC_ERR within 5 s of polling", ok, wc)
	}
	// 3 x 4 ms of timer: a correctness bound with room for a loaded
	// machine.
	if took > 250*time.Millisecond {
		t.Errorf("the WRITE to nobody: RETRY_EXC_ERR after %v, want within 250 ms (its timer: 3 x 4 ms)", took)
	}
	return c.sb.inlineTicks.Load() != ticks
}
