package verbs

import (
	"fmt"
	"math/rand/v2"
)

// Endpoint describes one side of a reliable connection: what the other
// side's QP needs to reach this one (QPN, first PSN, GID, MTU, how many
// RDMA READs and atomics this side accepts at once), and optionally a
// memory region this side exposes (RKey, Addr, Len), as perftest's and
// rdma-core's tools swap them before they connect. Two processes swap
// Endpoints out of band (cm.ExchangeEndpoints does it over TCP); Connect
// then takes each QP to RTS toward the other.
type Endpoint struct {
	QPN uint32
	// PSN is the first packet sequence number this side sends (the other
	// side's rq_psn).
	PSN uint32
	GID GID
	// MTU is the largest path MTU this side's port carries (its active
	// MTU); Connect uses the smaller of the two sides'.
	MTU MTU
	// RdAtomic is how many RDMA READ and atomic requests this side accepts
	// outstanding as responder (its max_dest_rd_atomic), which bounds the
	// other side's max_rd_atomic.
	RdAtomic uint8
	// RKey, Addr and Len describe a memory region this side lets the other
	// read, write or use atomically (zero when none).
	RKey uint32
	Addr uint64
	Len  uint64
}

// String formats the endpoint as perftest prints its "local address" and
// "remote address" lines (QPN, PSN, RKey, VAddr, GID).
func (e Endpoint) String() string {
	return fmt.Sprintf("QPN %#06x PSN %#06x MTU %v RdAtomic %d RKey %#08x VAddr %#016x Len %d GID %v",
		e.QPN, e.PSN, e.MTU, e.RdAtomic, e.RKey, e.Addr, e.Len, e.GID)
}

// WithMR returns e exposing mr: its RKey, address and length.
func (e Endpoint) WithMR(mr MR) Endpoint {
	e.RKey, e.Addr, e.Len = mr.RKey(), mr.Addr(), uint64(len(mr.Buf()))
	return e
}

// DefaultRdAtomic is the RdAtomic NewEndpoint offers, capped by the device's
// max_qp_rd_atom (perftest's default outstanding reads, 16).
const DefaultRdAtomic = 16

// NewEndpoint describes qp's side of a connection: its number, a random
// first PSN (24 bits, as perftest draws it), the GID at gidIndex of port,
// the port's active MTU and the device's max_qp_rd_atom (at most
// DefaultRdAtomic). Expose memory with WithMR.
func NewEndpoint(ctx Context, qp QP, port uint8, gidIndex int) (Endpoint, error) {
	if ctx == nil || qp == nil {
		return Endpoint{}, fmt.Errorf("verbs: endpoint of a nil context or QP: %w", ErrInvalidAttr)
	}
	if port == 0 {
		port = 1
	}
	pa, err := ctx.QueryPort(port)
	if err != nil {
		return Endpoint{}, err
	}
	gid, err := ctx.QueryGID(port, GIDIndexOrDefault(gidIndex))
	if err != nil {
		return Endpoint{}, err
	}
	da, err := ctx.QueryDevice()
	if err != nil {
		return Endpoint{}, err
	}
	rd := DefaultRdAtomic
	if da.MaxQPRdAtom > 0 && da.MaxQPRdAtom < rd {
		rd = da.MaxQPRdAtom
	}
	return Endpoint{QPN: qp.Num(), PSN: rand.Uint32() & 0xffffff, GID: gid, MTU: pa.ActiveMTU, RdAtomic: uint8(rd)}, nil
}

// ConnectOptions tune Connect. Zero fields take the defaults, which are
// those of perftest and rdma-core's ibv_rc_pingpong.
type ConnectOptions struct {
	// Port is the local port (default 1); GIDIndex the local GID index the
	// packets leave from (default DefaultGIDIndex, 1: the IPv4-mapped GID
	// of soft devices and rdma_rxe).
	Port     uint8
	GIDIndex int
	// Access is what the remote side may do to this side's memory through
	// the QP (qp_access_flags; default REMOTE_WRITE | REMOTE_READ |
	// REMOTE_ATOMIC).
	Access AccessFlags
	// MTU is the path MTU (default the smaller of the two Endpoints' MTU;
	// 1024 when neither says).
	MTU MTU
	// MaxRdAtomic is how many READs and atomics this side keeps
	// outstanding (max_rd_atomic; default the smaller of the two
	// Endpoints' RdAtomic, at least 1). MaxDestRdAtomic is how many it
	// accepts (max_dest_rd_atomic; default local.RdAtomic, at least 1).
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	// Timeout is the local ACK timeout code, 4.096 µs × 2^Timeout (default
	// 14, about 67 ms); RetryCnt and RNRRetry count retransmissions
	// (default 7 each; RNRRetry 7 retries forever); MinRNRTimer is the RNR
	// NAK timer code this side asks for (default 12, 0.64 ms).
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	// NoRetry makes RetryCnt and RNRRetry 0 (a zero RetryCnt alone takes
	// the default).
	NoRetry bool
	// HopLimit (default 64), TrafficClass and FlowLabel go into the
	// address vector's GRH.
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

func (o *ConnectOptions) fill(local, remote Endpoint) ConnectOptions {
	var c ConnectOptions
	if o != nil {
		c = *o
	}
	if c.Port == 0 {
		c.Port = 1
	}
	if c.Access == 0 {
		c.Access = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	}
	if c.MTU == 0 {
		c.MTU = local.MTU
		if c.MTU == 0 || remote.MTU != 0 && remote.MTU < c.MTU {
			c.MTU = remote.MTU
		}
		if c.MTU == 0 {
			c.MTU = MTU1024
		}
	}
	if c.MaxRdAtomic == 0 {
		c.MaxRdAtomic = max(min(local.RdAtomic, remote.RdAtomic), 1)
		if local.RdAtomic == 0 || remote.RdAtomic == 0 {
			c.MaxRdAtomic = max(local.RdAtomic, remote.RdAtomic, 1)
		}
	}
	if c.MaxDestRdAtomic == 0 {
		c.MaxDestRdAtomic = max(local.RdAtomic, 1)
	}
	if c.Timeout == 0 {
		c.Timeout = 14
	}
	if c.NoRetry {
		c.RetryCnt, c.RNRRetry = 0, 0
	} else {
		if c.RetryCnt == 0 {
			c.RetryCnt = 7
		}
		if c.RNRRetry == 0 {
			c.RNRRetry = 7
		}
	}
	if c.MinRNRTimer == 0 {
		c.MinRNRTimer = 12
	}
	if c.HopLimit == 0 {
		c.HopLimit = 64
	}
	return c
}

// Connect takes qp, an RC or UC QP in RESET, through INIT and RTR to RTS
// toward remote, with the three ibv_modify_qp calls and attribute masks
// rdma-core's examples use; local is qp's own Endpoint (its PSN is the
// first this side sends). opts may be nil. A failed step returns its error,
// naming the state it aimed at, and leaves qp where that step found it.
func Connect(qp QP, local, remote Endpoint, opts *ConnectOptions) error {
	if qp == nil {
		return fmt.Errorf("verbs: connect a nil QP: %w", ErrInvalidAttr)
	}
	o := opts.fill(local, remote)
	steps := []struct {
		attr QPAttr
		mask QPAttrMask
	}{
		{QPAttr{State: QPSInit, PortNum: o.Port, AccessFlags: o.Access},
			AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{QPAttr{State: QPSRTR, PathMTU: o.MTU, DestQPN: remote.QPN, RQPSN: remote.PSN & 0xffffff,
			MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer,
			AHAttr: AHAttr{DGID: remote.GID, SGIDIndex: uint8(GIDIndexOrDefault(o.GIDIndex)), HopLimit: o.HopLimit,
				TrafficClass: o.TrafficClass, FlowLabel: o.FlowLabel, PortNum: o.Port}},
			AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{QPAttr{State: QPSRTS, SQPSN: local.PSN & 0xffffff, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
			RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic},
			AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
	}
	if qp.Type() == QPTUC {
		// UC has no ACKs, READs or atomics: INIT takes no remote read or
		// atomic access, RTR and RTS none of the reliability attributes.
		steps[0].attr.AccessFlags &= AccessRemoteWrite
		steps[1].mask &^= AttrMaxDestRdAtomic | AttrMinRNRTimer
		steps[2].mask &^= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("verbs: connect QP %#x to %#x: to %v: %w", qp.Num(), remote.QPN, s.attr.State, err)
		}
	}
	return nil
}

// ConnectUD takes qp, a UD QP in RESET, through INIT and RTR to RTS with
// qkey, on port (0: port 1), its first PSN psn.
func ConnectUD(qp QP, port uint8, qkey, psn uint32) error {
	if qp == nil {
		return fmt.Errorf("verbs: connect a nil QP: %w", ErrInvalidAttr)
	}
	if port == 0 {
		port = 1
	}
	steps := []struct {
		attr QPAttr
		mask QPAttrMask
	}{
		{QPAttr{State: QPSInit, PortNum: port, QKey: qkey}, AttrState | AttrPKeyIndex | AttrPort | AttrQKey},
		{QPAttr{State: QPSRTR}, AttrState},
		{QPAttr{State: QPSRTS, SQPSN: psn & 0xffffff}, AttrState | AttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("verbs: UD QP %#x to %v: %w", qp.Num(), s.attr.State, err)
		}
	}
	return nil
}
