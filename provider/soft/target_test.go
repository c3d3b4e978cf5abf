//go:build linux

package soft

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/verbs"
)

// TestOpenTargetDelay: OpenOptions.TargetDelay reaches the engine: after
// a WRITE has timed the path's round trip, the QP's delay target lies the
// given delay above its least round trip (up to twice it: the target is
// scaled for the window), the default's 100µs without one, and there is
// none with the delay response off.
func TestOpenTargetDelay(t *testing.T) {
	for i, c := range []struct {
		target, want time.Duration // want 0: no target
	}{{0, engine.DefaultTargetDelay}, {25 * time.Microsecond, 25 * time.Microsecond}, {-1, 0}} {
		var devs [2]*Device
		for k := range devs {
			d, _, err := Open(OpenOptions{Addr: fmt.Sprintf("127.0.62.%d", 2*i+k+1), Path: "udp", TargetDelay: c.target})
			e2eMust(t, err)
			t.Cleanup(func() { d.Close() })
			devs[k] = d
		}
		ra, rb := e2eNewRes(t, devs[0], 4096), e2eNewRes(t, devs[1], 4096)
		cq := ra.cq(t, 4)
		qa, qb := ra.qp(t, verbs.QPTRC, cq, cq, nil, 4), rb.qp(t, verbs.QPTRC, rb.cq(t, 4), rb.cq(t, 4), nil, 4)
		e2eConnect(t, verbs.MTU1024, qa, devs[0], 0x100+uint32(i), qb, devs[1], 0x200+uint32(i))
		_, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: ra.sge(0, 64), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()}})
		e2eMust(t, err)
		if wc := e2ePoll(t, "WRITE", cq, 1); wc[0].Status != verbs.WCSuccess {
			t.Fatalf("target %v: WRITE completed %v", c.target, wc[0].Status)
		}
		devs[0].Stats() // orders the driver's last round before the read below
		s := qa.(*QP).Congestion()
		switch got := time.Duration(s.Target - s.MinRTT); {
		case s.MinRTT == 0:
			t.Errorf("target %v: no round trip measured after a signaled WRITE: %+v", c.target, s)
		case c.want == 0 && s.Target != 0:
			t.Errorf("delay response off: target %v, want none", time.Duration(s.Target))
		case c.want != 0 && (got < c.want || got > 2*c.want):
			t.Errorf("target %v: the QP's target %v above its least round trip, want %v to %v", c.target, got, c.want, 2*c.want)
		}
	}
}
