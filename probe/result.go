package probe

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Timestamps says which clock a probe's completion times came from.
type Timestamps uint8

// Timestamp kinds.
const (
	// TimestampsSoftware: T2..T5 come from the host clock: read by the
	// provider when it produced the completion (the soft device), or by
	// the prober and responder around their posts and polls (rdma_rxe,
	// RNICs without completion timestamps); see the package documentation.
	TimestampsSoftware Timestamps = iota
	// TimestampsHardware: T2..T5 are the device's completion timestamps
	// (libibverbs extended CQs on an RNIC that has them).
	TimestampsHardware
)

// String returns "software" or "hardware", the value of the timestamps label.
func (t Timestamps) String() string {
	if t == TimestampsHardware {
		return "hardware"
	}
	return "software"
}

// Peer is a responder a prober probes: where it is and the UD queue pair
// that answers there.
type Peer struct {
	// Name identifies the peer in results and metrics (a host name, or the
	// address when the pinglist gives none).
	Name string
	// Group is the peer's group (its ToR) in the pinglist, "" if none.
	Group string
	// Addr is the peer's IP address; GID its RoCEv2 GID (for IPv4, the
	// IPv4-mapped address).
	Addr netip.Addr
	GID  verbs.GID
	// QPN and QKey are those of the responder's UD queue pair.
	QPN  uint32
	QKey uint32
}

// Outcome is what became of one probe.
type Outcome uint8

// Outcomes.
const (
	// OutcomeOK: both ACKs arrived within the timeout; the delays are set.
	OutcomeOK Outcome = iota
	// OutcomeLost: the timeout passed without the second ACK.
	OutcomeLost
	// OutcomeLate: an ACK arrived for a probe already counted lost. It is
	// reported once per probe, apart from the OutcomeLost result.
	OutcomeLate
	// OutcomeError: the probe could not be sent or completed with an
	// error; Reason says which.
	OutcomeError
)

// String returns "ok", "lost", "late" or "error".
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeLost:
		return "lost"
	case OutcomeLate:
		return "late"
	}
	return "error"
}

// Result is the outcome of one probe, reported by a Prober.
type Result struct {
	Peer Peer
	// Class is the pinglist class that scheduled the probe ("tor_mesh",
	// "inter_tor", "static", or "" when probed directly).
	Class string
	// Seq is the probe's sequence number as carried on the wire.
	Seq uint64
	// FlowLabel is the AH flow label the probe was sent with, and
	// SrcPort the UDP source port it maps to (wire.SourcePort).
	FlowLabel uint32
	SrcPort   uint16
	// ResponderQPN is the responder QP probed (a peer may offer several).
	ResponderQPN uint32
	// Sent is the wall-clock time of T1.
	Sent time.Time
	// T1..T6 are the probe's six timestamps in nanoseconds: T1, T2, T5
	// and T6 on the prober's clock, T3 and T4 on the responder's (see the
	// package documentation). Zero when not reached.
	T1, T2, T3, T4, T5, T6 int64
	// NetworkRTT = (T5-T2) - (T4-T3), ResponderDelay = T4-T3,
	// ProberDelay = (T6-T1) - (T5-T2). Set for OutcomeOK.
	NetworkRTT     time.Duration
	ProberDelay    time.Duration
	ResponderDelay time.Duration
	Outcome        Outcome
	// Reason says why, for OutcomeError (a short label value such as
	// "post", "send_completion", "invalid_ack").
	Reason string
	// Timestamps says which clock T2..T5 came from (the prober's and the
	// responder's: hardware only when both are).
	Timestamps Timestamps
}

// Self is what a node serves at /probe/v1/self so that probers find its
// responder by its IP address alone.
type Self struct {
	Name       string    `json:"name"`
	Addr       string    `json:"addr"`
	GID        string    `json:"gid"`
	QPNs       []uint32  `json:"qpns"`
	QKey       uint32    `json:"qkey"`
	Provider   string    `json:"provider"`
	Device     string    `json:"device"`
	Timestamps string    `json:"timestamps"`
	Started    time.Time `json:"started"`
}
