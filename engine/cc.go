package engine

// CCMode selects how an engine's RC queue pairs share the network.
type CCMode uint8

// The congestion control modes.
const (
	// CCDefault is CCECN.
	CCDefault CCMode = iota
	// CCOff lets each QP have Config.Window packets unacknowledged, however
	// many QPs send to the same peer, and never sends a CNP: rdma_rxe's
	// behaviour.
	CCOff
	// CCLoss shares one congestion window among the QPs that send to the
	// same peer address, cut on loss (a PSN sequence NAK, a timeout) and
	// grown as ACKs come (see ccPath).
	CCLoss
	// CCECN is CCLoss that also cuts the window on CNPs (the reaction
	// point of DCQCN) and answers RC packets that arrive CE-marked, or that
	// come while the packet path drops, with CNPs (the notification point).
	CCECN
)

// DefaultCNPInterval is Config.CNPInterval's default: 50 µs, DCQCN's
// interval between a notification point's CNPs to one flow.
const DefaultCNPInterval = 50_000

// String returns "off", "loss" or "ecn".
func (m CCMode) String() string {
	switch m {
	case CCOff:
		return "off"
	case CCLoss:
		return "loss"
	case CCECN, CCDefault:
		return "ecn"
	}
	return "CCMode(?)"
}

// ParseCCMode parses "off", "loss" or "ecn".
func ParseCCMode(s string) (CCMode, bool) {
	for _, m := range []CCMode{CCOff, CCLoss, CCECN} {
		if s == m.String() {
			return m, true
		}
	}
	return 0, false
}
