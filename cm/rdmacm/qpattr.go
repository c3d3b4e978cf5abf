package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/verbs"
)

// QPStep is one ibv_modify_qp call.
type QPStep struct {
	Attr verbs.QPAttr
	Mask verbs.QPAttrMask
}

// QPPlan is how a connection brings an RC QP from RESET to RTS: the
// attributes of INIT, RTR and RTS, derived from the REQ and REP as Linux's
// ib_cm derives them (cm_init_qp_init_attr, _rtr_attr, _rts_attr).
type QPPlan [3]QPStep

// Apply modifies the QP through INIT, RTR and RTS. The QP is in RESET, or
// in INIT with receives posted (then the INIT step is an INIT to INIT
// modify, as rdma_accept and rdma_connect do).
func (p *QPPlan) Apply(qp verbs.QP) error {
	a, err := qp.Query()
	if err != nil {
		return err
	}
	if a.State != verbs.QPSReset && a.State != verbs.QPSInit {
		return fmt.Errorf("rdmacm: QP %#x is in %v: %w", qp.Num(), a.State, ErrQPState)
	}
	if g, ok := qp.(interface{ GIDIndex() int }); ok && p[1].Attr.AHAttr.SGIDIndex == verbs.DefaultGIDIndex {
		// A device that says which GID it sends from (a soft device on
		// an IPv6 address: after the interface's IPv4-mapped GIDs).
		p[1].Attr.AHAttr.SGIDIndex = uint8(g.GIDIndex())
	}
	for i := range p {
		if err := qp.Modify(&p[i].Attr, p[i].Mask); err != nil {
			return fmt.Errorf("rdmacm: QP to %v: %w", p[i].Attr.State, err)
		}
	}
	return nil
}

// ErrQPState matches a QP given to Dial or Accept in a state other than
// RESET or INIT.
var ErrQPState = errors.New("rdmacm: the QP must be in RESET or INIT")

// InitQP brings an RC QP from RESET to INIT on port 1 with remote write,
// read and atomic access, as rdma_create_qp does, so that receives can be
// posted before Dial or Accept.
func InitQP(qp verbs.QP) error {
	return qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
}

// MinRNRTimer is the RNR NAK timer code of a connected QP (0.64 ms):
// Linux leaves 0 there, which means 655 ms.
const MinRNRTimer = 12

// plan builds a QP plan. The arguments are this side's view: the QPN and
// first PSN of the peer, the PSN this side receives first, its READ/atomic
// depths as initiator (maxRd) and responder (maxDest), the RNR retry count
// it uses.
func plan(req *ib.REQ, peer netip.Addr, destQPN, sqPSN, rqPSN uint32, maxRd, maxDest, rnrRetry uint8) QPPlan {
	access := verbs.AccessRemoteWrite
	if maxDest > 0 {
		access |= verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	return QPPlan{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: access},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU(req.PathMTU), DestQPN: destQPN, RQPSN: rqPSN,
			MaxDestRdAtomic: maxDest, MinRNRTimer: MinRNRTimer,
			AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(peer), SGIDIndex: verbs.DefaultGIDIndex, FlowLabel: req.FlowLabel, HopLimit: req.HopLimit,
				TrafficClass: req.TrafficClass, PortNum: 1}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: sqPSN, Timeout: req.LocalACKTimeout, RetryCnt: req.RetryCount,
			RNRRetry: rnrRetry, MaxRdAtomic: maxRd},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic},
	}
}

// PassivePlan is the passive side's QP plan once it has chosen its REP:
// it sends from the REQ's starting PSN, receives from the REP's, initiates
// REP.InitiatorDepth READs and answers REP.ResponderResources.
func PassivePlan(req *ib.REQ, rep *ib.REP, peer netip.Addr) QPPlan {
	return plan(req, peer, req.LocalQPN, req.StartingPSN, rep.StartingPSN, rep.InitiatorDepth,
		rep.ResponderResources, req.RNRRetryCount)
}

// ActivePlan is the active side's QP plan when the REP has come: it sends
// from the REP's starting PSN, receives from the REQ's, initiates
// REP.ResponderResources READs and answers REP.InitiatorDepth.
func ActivePlan(req *ib.REQ, rep *ib.REP, peer netip.Addr) QPPlan {
	return plan(req, peer, rep.LocalQPN, rep.StartingPSN, req.StartingPSN, rep.ResponderResources,
		rep.InitiatorDepth, rep.RNRRetryCount)
}

// AnswerDepths returns the responder resources and initiator depth of a
// REP answering a REQ, as rdma_accept limits them: responder resources at
// most the REQ's initiator depth, initiator depth at most its responder
// resources, each at most the local maximum.
func AnswerDepths(req *ib.REQ, wantRR, wantID uint8) (rr, id uint8) {
	return min(wantRR, req.InitiatorDepth), min(wantID, req.ResponderResources)
}
