package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/goroce/goroce/engine"
)

// Congestion is what a soft device's congestion control did during one
// side's run (Outcome.Congestion): the device's mode, the growth of its
// counters (engine.Stats) from the start of Run to its end, the last ACKs
// of the drain included, and the first QP's state at the end. Devices
// without such counters (ibverbs) have none.
type Congestion struct {
	Mode         engine.CCMode `json:"-"`
	Packets      uint64        `json:"packets_sent"` // packets the device sent
	Retransmits  uint64        `json:"retransmits"`
	Timeouts     uint64        `json:"timeouts"`
	NAKs         uint64        `json:"naks_received"`
	Probes       uint64        `json:"tail_probes"`
	CNPsSent     uint64        `json:"cnps_sent"`
	CNPsReceived uint64        `json:"cnps_received"`
	Cuts         uint64        `json:"window_cuts"`
	ECNMarked    uint64        `json:"ecn_marked"`
	RxCongestion uint64        `json:"rx_drops_signalled"` // times the packet path reported receive drops
	// QPN is the first QP's number, and Window, SRTT, MinRTT, Alpha and
	// PathQPs its engine.CCState after the run: the window of the path to
	// the peer in packets (0 for UD QPs and under CCOff), the smoothed and
	// the least round trip, DCQCN's alpha, the QPs sharing the window.
	QPN     uint32        `json:"qpn"`
	Window  int           `json:"window,omitempty"`
	SRTT    time.Duration `json:"srtt_ns,omitempty"`
	MinRTT  time.Duration `json:"min_rtt_ns,omitempty"`
	Alpha   float64       `json:"alpha,omitempty"`
	PathQPs int           `json:"path_qps,omitempty"`
	// TargetDelay is the delay target in effect (--cc-target): how far
	// above MinRTT the round trip may rise before the window falls; 0
	// with the delay response off (and with no window).
	TargetDelay time.Duration `json:"target_delay_ns,omitempty"`
}

// statser is a device that counts what its engine did (*soft.Device).
type statser interface{ Stats() engine.Stats }

// ccQP is a QP that shows its congestion control state (*soft.QP).
type ccQP interface{ Congestion() engine.CCState }

// ccStart notes the device's counters at the start of a run, when it keeps
// them.
func (s *session) ccStart() {
	if d, ok := s.vctx.Device().(statser); ok {
		s.ccDev, s.ccFrom = d, d.Stats()
	}
}

// ccEnd sets s.out.Congestion from the device's counters since ccStart and
// the first QP's state; call it after the drain, before the QPs go.
func (s *session) ccEnd() {
	if s.ccDev == nil || len(s.qps) == 0 {
		return
	}
	q, ok := s.qps[0].(ccQP)
	if !ok {
		return
	}
	st := q.Congestion()
	cc := ccDelta(s.ccFrom, s.ccDev.Stats())
	cc.Mode, cc.QPN = st.Mode, s.qps[0].Num()
	if st.Window > 0 {
		cc.Window, cc.SRTT, cc.MinRTT, cc.Alpha, cc.PathQPs = st.Window, time.Duration(st.SRTT), time.Duration(st.MinRTT), st.Alpha, st.PathQPs
		cc.TargetDelay = time.Duration(max(st.TargetDelay, 0))
	}
	s.out.Congestion = cc
}

// ccDelta returns the congestion counters' growth from a to b.
func ccDelta(a, b engine.Stats) *Congestion {
	return &Congestion{
		Packets:      b.TxPackets - a.TxPackets,
		Retransmits:  b.Retransmits - a.Retransmits,
		Timeouts:     b.Timeouts - a.Timeouts,
		NAKs:         b.NAKsReceived - a.NAKsReceived,
		Probes:       b.TailProbes - a.TailProbes,
		CNPsSent:     b.CNPsSent - a.CNPsSent,
		CNPsReceived: b.CNPsReceived - a.CNPsReceived,
		Cuts:         b.CongestionCuts - a.CongestionCuts,
		ECNMarked:    b.ECNMarked - a.ECNMarked,
		RxCongestion: b.RxCongestion - a.RxCongestion,
	}
}

// RetransmitPercent is the retransmissions' share of the packets sent, in
// percent.
func (c *Congestion) RetransmitPercent() float64 {
	if c.Packets == 0 {
		return 0
	}
	return 100 * float64(c.Retransmits) / float64(c.Packets)
}

// WriteCongestion prints c after a report's table (nothing when c is nil):
// a line of the counters and, when the first QP had a window (RC under
// loss or ecn), a line of its final window, round trips and delay target.
func WriteCongestion(w io.Writer, c *Congestion) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, " congestion: %v  retransmits %d (%.2f%% of %d packets)  timeouts %d  NAKs %d  probes %d  CNPs sent %d received %d  window cuts %d  ECN-marked %d  rx drops signalled %d\n",
		c.Mode, c.Retransmits, c.RetransmitPercent(), c.Packets, c.Timeouts, c.NAKs, c.Probes, c.CNPsSent, c.CNPsReceived, c.Cuts, c.ECNMarked, c.RxCongestion)
	if c.Window == 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Fprintf(w, " congestion: QP 0x%04x  window %d packets  SRTT %.2f usec  min RTT %.2f usec", c.QPN, c.Window, us(c.SRTT), us(c.MinRTT))
	if c.TargetDelay > 0 {
		fmt.Fprintf(w, "  delay target %.2f usec", us(c.TargetDelay))
	} else {
		fmt.Fprint(w, "  delay target off")
	}
	if c.Mode == engine.CCECN {
		fmt.Fprintf(w, "  alpha %.3f", c.Alpha)
	}
	fmt.Fprintf(w, "  QPs sharing it %d\n", c.PathQPs)
}
