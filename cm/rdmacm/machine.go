package rdmacm

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/goroce/goroce/cm/ib"
)

// MachineConfig configures a Machine. Zero fields take the defaults, which
// are Linux's on RoCE.
type MachineConfig struct {
	// Local is the device's IPv4 or IPv6 address, GUID its CA GUID (sent
	// in REQ and REP).
	Local netip.Addr
	GUID  uint64
	// PathMTU is the IB MTU code of the REQs this side sends (default 3,
	// 1024 bytes: what Linux picks for a 1500-byte link).
	PathMTU uint8
	// ResponseTimeout is the CM response timeout code a REQ advertises
	// for both sides (default 20: 4.3 s).
	ResponseTimeout uint8
	// PacketLifeTime is the packet life time code of the path (default 18:
	// 1.07 s): a request is resent after twice it plus the peer's CM
	// response timeout.
	PacketLifeTime uint8
	// MaxRetries is how often a REQ, REP or DREQ is resent before the
	// connection fails (default 15).
	MaxRetries int
	// ACKTimeout is the local ACK timeout code of the QPs (default 19,
	// what Linux computes between two rdma_rxe devices).
	ACKTimeout uint8
	// MRATimeout is the service timeout code an MRA asks for (default 22:
	// 17 s, rdma_cm's CMA_CM_MRA_SETTING).
	MRATimeout uint8
	// TimeWait is how long a closed connection's IDs stay reserved, in
	// nanoseconds (default 2 s).
	TimeWait int64
	// QuickRetry, when above 0, is the first resend interval of a REQ, in
	// nanoseconds, doubled at each resend up to 2 x QuickRetry, for as
	// long as the usual interval (2 x PacketLifeTime + ResponseTimeout,
	// 6.4 s with the defaults); then the MaxRetries resends go on as
	// Linux's do. A REQ sent before its peer's device or listener was up
	// is so answered soon after the peer comes. An MRA ends the quick
	// resends. 0 (a Machine's default) or below: none. The Manager's
	// default is DefaultQuickRetry.
	QuickRetry int64
	// Seed seeds comm IDs and PSNs (default: from crypto/rand).
	Seed [32]byte
}

// ConnState is the state of one connection in a Machine.
type ConnState uint8

// Connection states (IBTA 12.9's, those rdma_cm goes through).
const (
	StateIdle ConnState = iota
	StateREQSent
	StateREPReceived // REP in: the active side brings its QP up, then Ready
	StateREQReceived // REQ in: the application decides
	StateREPSent
	StateEstablished
	StateDREQSent
	StateTimeWait
)

var stateNames = [...]string{"IDLE", "REQ_SENT", "REP_RCVD", "REQ_RCVD", "REP_SENT", "ESTABLISHED", "DREQ_SENT", "TIMEWAIT"}

// String returns the state's name as Linux's ib_cm spells it.
func (s ConnState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "ConnState(?)"
}

// EventKind says what a machine Event is.
type EventKind uint8

// Event kinds.
const (
	// EvSend: send MAD to To.
	EvSend EventKind = iota + 1
	// EvRequest: a REQ for a listener (Listener, REQ, Header, From).
	// Answer with Accept or Reject.
	EvRequest
	// EvReply: the active side's REP arrived (REP): bring the QP to RTR and
	// RTS, then call Ready (or Reject).
	EvReply
	// EvEstablished: the connection is up (the passive side got the RTU,
	// or the active side sent it).
	EvEstablished
	// EvRejected: the peer rejected (Reason, PrivateData).
	EvRejected
	// EvTimeout: the peer did not answer a REQ or REP (unreachable).
	EvTimeout
	// EvDisconnected: the peer disconnected (a DREQ came and was
	// answered): move the QP to ERROR.
	EvDisconnected
	// EvClosed: a local Disconnect finished (DREP came, or the DREQ timed
	// out).
	EvClosed
)

var evNames = [...]string{"", "SEND", "REQUEST", "REPLY", "ESTABLISHED", "REJECTED", "TIMEOUT", "DISCONNECTED", "CLOSED"}

// String returns the kind's name.
func (k EventKind) String() string {
	if int(k) < len(evNames) {
		return evNames[k]
	}
	return "EventKind(?)"
}

// Event is what a Machine asks its driver to do or tells it.
type Event struct {
	Kind EventKind
	// ID is the connection's local comm ID (0 for a send that answers no
	// connection).
	ID uint32
	// EvSend.
	To  netip.Addr
	MAD [ib.MADSize]byte
	// EvRequest.
	Listener uint32
	From     netip.Addr
	REQ      ib.REQ
	Header   ib.CMAHeader
	// EvReply.
	REP ib.REP
	// EvRejected.
	Reason      uint16
	PrivateData []byte
}

// String describes the event briefly.
func (ev Event) String() string {
	switch ev.Kind {
	case EvSend:
		h, _ := ib.ParseMADHeader(ev.MAD[:])
		return fmt.Sprintf("%v %08x: %v to %v", ev.Kind, ev.ID, h.AttrID, ev.To)
	case EvRejected:
		return fmt.Sprintf("%v %08x: reason %d", ev.Kind, ev.ID, ev.Reason)
	}
	return fmt.Sprintf("%v %08x", ev.Kind, ev.ID)
}

// Stats counts what a Machine did with what it got.
type Stats struct {
	Received uint64 // MADs in
	Sent     uint64 // MADs out, resends included
	Resent   uint64 // resends on timeout
	// QuickResent counts the resends of Resent on the QuickRetry schedule.
	QuickResent uint64
	// RefusedResends counts the REJs (reason 8) that a connection retrying
	// refusals took as "not yet" (ConnectParams.RefusedUntil).
	RefusedResends uint64
	Malformed      uint64 // not CM MADs, or not parsable
	Unmatched      uint64 // messages for no connection, or whose IDs or sender do not match it
	Duplicates     uint64 // duplicate REQ, REP, RTU, DREQ
	Rejects        uint64 // REJs sent
	// StaleRejects counts the REJs of Rejects that answer a REQ for a
	// connection in time-wait (reason 10, stale connection), as Linux's
	// CM does: a duplicate REQ, resent while its REP was on its way,
	// that arrives only after the connection has closed, or a REQ from a
	// QP still in time-wait. A busy or lossy network makes them; the
	// active side, whose connection is in time-wait too, ignores them.
	StaleRejects uint64
	// NoListenerRejects counts the REJs of Rejects that answer a REQ for a
	// service and address nobody listens on (reason 8, invalid service
	// ID), as a client that dials before its server listens meets; a
	// perftest client then dials again (perftest.DialCM).
	NoListenerRejects uint64
}

// Errors of Machine operations.
var (
	ErrNoConn     = errors.New("rdmacm: no such connection")
	ErrState      = errors.New("rdmacm: operation not allowed in the connection's state")
	ErrAddrInUse  = errors.New("rdmacm: address already in use")
	ErrNoListener = errors.New("rdmacm: no such listener")
)

type conn struct {
	id, remoteID uint32
	state        ConnState
	active       bool
	peer         netip.Addr
	tid          uint64 // of the REQ (REP, REJ, MRA, RTU echo it)
	req          ib.REQ // the REQ sent or received
	rep          ib.REP // the REP sent or received
	remoteQPN    uint32
	localQPN     uint32
	// The message being resent, its timer and retries left.
	last     [ib.MADSize]byte
	timerAt  int64
	interval int64
	retries  int
	quick    int64 // the next quick REQ resend interval (QuickRetry), 0 when over
	quickEnd int64 // when the quick resends end
	refused  int64 // ConnectParams.RefusedUntil
	expires  int64 // time-wait end
	listener uint32
}

type twKey struct {
	peer netip.Addr
	qpn  uint32
}

type listener struct {
	id        uint32
	serviceID uint64
	addr      netip.Addr // unspecified: any
}

// Machine is the IB CM and rdma_cm state machine of one device, sans I/O:
// MADs, application calls and the time go in; MADs to send, events and
// deadlines come out (Next, NextDeadline). Not safe for concurrent use.
type Machine struct {
	cfg       MachineConfig
	rnd       *rand.Rand
	conns     map[uint32]*conn
	byRemote  map[twKey]uint32 // (peer, remote comm ID) -> local ID, for REQ duplicates
	timewait  map[twKey]int64  // (peer, peer QPN) -> end of time-wait
	listeners map[uint32]*listener
	nextL     uint32
	events    []Event
	stats     Stats
}

// NewMachine returns a machine for a device.
func NewMachine(cfg MachineConfig) *Machine {
	if cfg.PathMTU == 0 {
		cfg.PathMTU = 3
	}
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.PacketLifeTime == 0 {
		cfg.PacketLifeTime = 18
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 15
	}
	if cfg.ACKTimeout == 0 {
		cfg.ACKTimeout = 19
	}
	if cfg.MRATimeout == 0 {
		cfg.MRATimeout = 22
	}
	if cfg.TimeWait <= 0 {
		cfg.TimeWait = 2e9
	}
	if cfg.Seed == ([32]byte{}) {
		_, _ = crand.Read(cfg.Seed[:])
	}
	return &Machine{cfg: cfg, rnd: rand.New(rand.NewChaCha8(cfg.Seed)), conns: map[uint32]*conn{},
		byRemote: map[twKey]uint32{}, timewait: map[twKey]int64{}, listeners: map[uint32]*listener{}}
}

// Config returns the configuration with defaults filled in.
func (m *Machine) Config() MachineConfig { return m.cfg }

// Stats returns the counters.
func (m *Machine) Stats() Stats { return m.stats }

// Next returns the next event, ok false when there is none.
func (m *Machine) Next() (ev Event, ok bool) {
	if len(m.events) == 0 {
		return Event{}, false
	}
	ev = m.events[0]
	m.events[0] = Event{}
	m.events = m.events[1:]
	if len(m.events) == 0 {
		m.events = m.events[:0:0]
	}
	return ev, true
}

// Conns returns how many connections the machine tracks (time-wait
// included).
func (m *Machine) Conns() int { return len(m.conns) }

// State returns a connection's state (StateIdle when unknown).
func (m *Machine) State(id uint32) ConnState {
	if c := m.conns[id]; c != nil {
		return c.state
	}
	return StateIdle
}

// RandomPSN returns a random 24-bit PSN.
func (m *Machine) RandomPSN() uint32 { return m.rnd.Uint32() & 0xFFFFFF }

func (m *Machine) newID() uint32 {
	for {
		id := m.rnd.Uint32()
		if id != 0 && m.conns[id] == nil {
			return id
		}
	}
}

// Listen registers a listener for a service ID on an address (unspecified:
// any of the device's).
func (m *Machine) Listen(serviceID uint64, addr netip.Addr) (uint32, error) {
	for _, l := range m.listeners {
		if l.serviceID == serviceID && (!l.addr.IsValid() || !addr.IsValid() || l.addr == addr) {
			return 0, ErrAddrInUse
		}
	}
	m.nextL++
	m.listeners[m.nextL] = &listener{id: m.nextL, serviceID: serviceID, addr: addr}
	return m.nextL, nil
}

// Unlisten removes a listener; its requests not yet answered are rejected
// (reason 28).
func (m *Machine) Unlisten(now int64, id uint32) error {
	if m.listeners[id] == nil {
		return ErrNoListener
	}
	delete(m.listeners, id)
	for _, c := range m.conns {
		if c.listener == id && c.state == StateREQReceived {
			_ = m.Reject(now, c.id, ib.RejConsumer, nil)
		}
	}
	return nil
}

// ConnectParams describe an active connection.
type ConnectParams struct {
	Peer      netip.Addr
	ServiceID uint64
	QPN       uint32
	// PSN is the first PSN this side's QP receives (the REQ's starting PSN).
	PSN                uint32
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 3 bits (default 7 is the caller's)
	RNRRetryCount      uint8
	SrcPort            uint16 // rdma_cm source port (cma_hdr)
	PrivateData        []byte // the application's, at most 56 bytes
	TrafficClass       uint8
	HopLimit           uint8 // default 64
	// RefusedUntil, when after the time, keeps the connection when a REJ
	// for want of a listener (reason 8) answers its REQ before then: the
	// REQ is sent again RefusedResend later, with the same comm ID (see
	// RetryRefused).
	RefusedUntil int64
}

// RefusedResend is how long after a REJ 8 a connection that retries
// refusals (ConnectParams.RefusedUntil) sends its REQ again.
const RefusedResend = int64(10e6)

// MaxREQPrivate is the most private data an application puts in an
// rdma_cm REQ.
const MaxREQPrivate = ib.REQPrivateSize - ib.CMAHeaderSize

// Connect starts an active connection: it sends a REQ and returns the
// connection's ID.
func (m *Machine) Connect(now int64, p ConnectParams) (uint32, error) {
	if len(p.PrivateData) > MaxREQPrivate {
		return 0, ib.ErrTooLong
	}
	if p.Peer = p.Peer.Unmap(); !p.Peer.IsValid() || p.Peer.Is4() != m.cfg.Local.Unmap().Is4() {
		return 0, errors.New("rdmacm: the peer must be an address of the device's family (IPv4 or IPv6)")
	}
	if p.HopLimit == 0 {
		p.HopLimit = 64
	}
	c := &conn{id: m.newID(), active: true, peer: p.Peer, localQPN: p.QPN, state: StateREQSent, refused: p.RefusedUntil}
	c.tid = uint64(2)<<32 | uint64(c.id)
	dport := uint16(p.ServiceID)
	c.req = ib.REQ{LocalCommID: c.id, ServiceID: p.ServiceID, LocalCAGUID: m.cfg.GUID, LocalQPN: p.QPN,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: m.cfg.ResponseTimeout, TransportType: ib.TransportRC, StartingPSN: p.PSN & 0xFFFFFF,
		LocalCMResponseTimeout: m.cfg.ResponseTimeout, RetryCount: p.RetryCount & 7, PKey: 0xFFFF,
		PathMTU: m.cfg.PathMTU, RNRRetryCount: p.RNRRetryCount & 7, MaxCMRetries: uint8(min(m.cfg.MaxRetries, 15)),
		PrimaryLocalLID: 0xFFFF, PrimaryRemoteLID: 0xFFFF,
		PrimaryLocalGID: mapped(m.cfg.Local), PrimaryRemoteGID: mapped(p.Peer),
		FlowLabel: ib.FlowLabel(p.SrcPort, dport), TrafficClass: p.TrafficClass, HopLimit: p.HopLimit,
		LocalACKTimeout: m.cfg.ACKTimeout}
	h := ib.CMAHeader{SrcPort: p.SrcPort, Src: m.cfg.Local, Dst: p.Peer}
	h.Marshal(c.req.PrivateData[:])
	copy(c.req.PrivateData[ib.CMAHeaderSize:], p.PrivateData)
	c.req.PrivateLen = uint8(1 + ib.CMAHeaderSize + len(p.PrivateData))
	m.conns[c.id] = c
	m.sendTimed(now, c, &c.req, m.reqInterval())
	if q := m.cfg.QuickRetry; q > 0 && q < c.interval {
		c.quick, c.timerAt, c.quickEnd = q, now+q, now+c.interval
	}
	return c.id, nil
}

func mapped(a netip.Addr) [16]byte { return netip.AddrFrom16(a.As16()).As16() }

func (m *Machine) reqInterval() int64 {
	return 2*ib.TimeoutNanos(m.cfg.PacketLifeTime) + ib.TimeoutNanos(m.cfg.ResponseTimeout)
}

// AcceptParams answer a request.
type AcceptParams struct {
	QPN uint32
	// PSN is the first PSN this side's QP receives (the REP's starting PSN).
	PSN                uint32
	ResponderResources uint8 // already limited by the REQ's initiator depth
	InitiatorDepth     uint8 // already limited by the REQ's responder resources
	RNRRetryCount      uint8
	PrivateData        []byte // at most 196 bytes
}

// Accept answers a request with a REP. The caller has brought its QP to
// RTS (PassiveQPAttrs) first.
func (m *Machine) Accept(now int64, id uint32, p AcceptParams) error {
	c := m.conns[id]
	if c == nil {
		return ErrNoConn
	}
	if c.state != StateREQReceived {
		return ErrState
	}
	if len(p.PrivateData) > ib.REPPrivateSize {
		return ib.ErrTooLong
	}
	c.localQPN = p.QPN
	c.rep = ib.REP{LocalCommID: c.id, RemoteCommID: c.remoteID, LocalQPN: p.QPN, StartingPSN: p.PSN & 0xFFFFFF,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, TargetACKDelay: 15,
		RNRRetryCount: p.RNRRetryCount & 7, LocalCAGUID: m.cfg.GUID}
	copy(c.rep.PrivateData[:], p.PrivateData)
	// Only to a peer whose REQ said its length too: Linux's ib_cm does not
	// ignore REP byte 15 (rdma_rxe's rping, ib_write_bw -R answered a REP
	// with it set by a REJ 28), so a peer that may be Linux gets the
	// byte as IBA reserves it, 0.
	if c.req.PrivateLen != 0 {
		c.rep.PrivateLen = uint8(1 + len(p.PrivateData))
	}
	c.state = StateREPSent
	m.sendTimed(now, c, &c.rep, ib.TimeoutNanos(c.req.LocalCMResponseTimeout)+2*ib.TimeoutNanos(m.cfg.PacketLifeTime))
	c.retries = min(int(c.req.MaxCMRetries), m.cfg.MaxRetries)
	return nil
}

// Reject answers a request (or, on the active side, a reply) with a REJ
// and forgets the connection.
func (m *Machine) Reject(now int64, id uint32, reason uint16, private []byte) error {
	c := m.conns[id]
	if c == nil {
		return ErrNoConn
	}
	kind := ib.KindREQ
	switch c.state {
	case StateREQReceived:
	case StateREPReceived:
		kind = ib.KindREP
	default:
		return ErrState
	}
	if len(private) > ib.REJPrivateSize {
		return ib.ErrTooLong
	}
	rej := ib.REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgRejected: kind, Reason: reason}
	copy(rej.PrivateData[:], private)
	m.send(c.peer, c.id, c.tid, &rej)
	m.stats.Rejects++
	m.forget(c)
	return nil
}

// Ready tells the active side's QP is at RTS after EvReply: the RTU goes
// out and the connection is established.
func (m *Machine) Ready(now int64, id uint32) error {
	c := m.conns[id]
	if c == nil {
		return ErrNoConn
	}
	if c.state != StateREPReceived {
		return ErrState
	}
	rtu := ib.RTU{LocalCommID: c.id, RemoteCommID: c.remoteID}
	m.send(c.peer, c.id, c.tid, &rtu)
	c.state = StateEstablished
	m.emit(Event{Kind: EvEstablished, ID: c.id})
	return nil
}

// Established marks a passive connection established before its RTU came
// (its QP received a valid packet from the peer, which proves the REP
// arrived).
func (m *Machine) Established(id uint32) {
	if c := m.conns[id]; c != nil && c.state == StateREPSent {
		c.state = StateEstablished
		c.timerAt = 0
		m.emit(Event{Kind: EvEstablished, ID: c.id})
	}
}

// Disconnect sends a DREQ on an established connection (EvClosed
// follows); on a connection not yet established it gives up on it (a REJ
// on the passive side, nothing on the wire otherwise).
func (m *Machine) Disconnect(now int64, id uint32) error {
	c := m.conns[id]
	if c == nil {
		return ErrNoConn
	}
	switch c.state {
	case StateEstablished:
		d := ib.DREQ{LocalCommID: c.id, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}
		c.state = StateDREQSent
		c.tid = uint64(2)<<32 | uint64(c.id)
		m.sendTimed(now, c, &d, ib.TimeoutNanos(m.cfg.ResponseTimeout)+2*ib.TimeoutNanos(m.cfg.PacketLifeTime))
		return nil
	case StateREQReceived, StateREPReceived:
		return m.Reject(now, id, ib.RejConsumer, nil)
	case StateDREQSent, StateTimeWait:
		return nil
	default: // REQ_SENT, REP_SENT
		if c.state == StateREPSent {
			rej := ib.REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgRejected: ib.KindOther, Reason: ib.RejTimeout}
			m.send(c.peer, c.id, c.tid, &rej)
		}
		m.forget(c)
		return nil
	}
}

// RetryRefused moves a connection's ConnectParams.RefusedUntil to until
// when that is later.
func (m *Machine) RetryRefused(id uint32, until int64) {
	if c := m.conns[id]; c != nil && c.active {
		c.refused = max(c.refused, until)
	}
}

// NextDeadline returns when Tick must next run (0: no timer).
func (m *Machine) NextDeadline() int64 {
	var d int64
	for _, c := range m.conns {
		t := c.timerAt
		if c.state == StateTimeWait {
			t = c.expires
		}
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	for _, t := range m.timewait {
		if d == 0 || t < d {
			d = t
		}
	}
	return d
}

// Tick runs the timers due at now: resends, failures, the end of
// time-wait.
func (m *Machine) Tick(now int64) {
	for k, t := range m.timewait {
		if t <= now {
			delete(m.timewait, k)
		}
	}
	for _, c := range m.conns {
		if c.state == StateTimeWait {
			if c.expires <= now {
				m.forget(c)
			}
			continue
		}
		if c.timerAt == 0 || c.timerAt > now {
			continue
		}
		if c.quick > 0 && c.state == StateREQSent {
			m.quickResend(now, c)
			continue
		}
		if c.retries > 0 {
			c.retries--
			c.timerAt = now + c.interval
			m.stats.Resent++
			m.sendRaw(c.peer, c.id, c.last)
			continue
		}
		c.timerAt = 0
		switch c.state {
		case StateREQSent:
			m.emit(Event{Kind: EvTimeout, ID: c.id})
			m.forget(c)
		case StateREQReceived:
			rej := ib.REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgRejected: ib.KindREQ, Reason: ib.RejTimeout}
			m.send(c.peer, c.id, c.tid, &rej)
			m.emit(Event{Kind: EvTimeout, ID: c.id})
			m.forget(c)
		case StateREPSent:
			rej := ib.REJ{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgRejected: ib.KindREP, Reason: ib.RejTimeout}
			m.send(c.peer, c.id, c.tid, &rej)
			m.emit(Event{Kind: EvTimeout, ID: c.id})
			m.forget(c)
		case StateDREQSent:
			m.emit(Event{Kind: EvClosed, ID: c.id})
			m.enterTimeWait(now, c)
		}
	}
}

// HandleMAD takes a MAD that arrived on QP 1 from the address given.
func (m *Machine) HandleMAD(now int64, mad []byte, from netip.Addr) {
	m.stats.Received++
	h, body, err := ib.CheckCM(mad)
	if err != nil {
		m.stats.Malformed++
		return
	}
	msg, err := ib.Parse(h.AttrID, body)
	if err != nil {
		m.stats.Malformed++
		return
	}
	from = from.Unmap()
	switch x := msg.(type) {
	case *ib.REQ:
		m.onREQ(now, h.TID, x, from)
	case *ib.REP:
		m.onREP(now, x, from)
	case *ib.RTU:
		m.onRTU(x, from)
	case *ib.REJ:
		m.onREJ(now, x, from)
	case *ib.MRA:
		m.onMRA(now, x, from)
	case *ib.DREQ:
		m.onDREQ(now, h.TID, x, from)
	case *ib.DREP:
		m.onDREP(now, x, from)
	default: // SIDR: no UD ids
		m.stats.Unmatched++
	}
}

// match returns the connection a message names by local (our) and remote
// (their) comm ID, from the peer it was set up with.
func (m *Machine) match(ours, theirs uint32, from netip.Addr, checkRemote bool) *conn {
	c := m.conns[ours]
	if c == nil || c.peer != from || (checkRemote && c.remoteID != theirs) {
		m.stats.Unmatched++
		return nil
	}
	return c
}

func (m *Machine) onREQ(now int64, tid uint64, r *ib.REQ, from netip.Addr) {
	key := twKey{from, r.LocalCommID}
	if id, ok := m.byRemote[key]; ok {
		m.stats.Duplicates++
		c := m.conns[id]
		switch c.state {
		case StateREQReceived:
			mra := ib.MRA{LocalCommID: c.id, RemoteCommID: c.remoteID, MsgMRAed: ib.KindREQ, ServiceTimeout: m.cfg.MRATimeout}
			m.send(from, c.id, c.tid, &mra)
		case StateTimeWait:
			m.stats.StaleRejects++
			m.sendREJ(from, tid, c.id, r.LocalCommID, ib.KindREQ, ib.RejStaleConn)
		}
		return // REP_SENT: the REP's own timer resends it
	}
	if _, ok := m.timewait[twKey{from, r.LocalQPN}]; ok {
		m.stats.StaleRejects++
		m.sendREJ(from, tid, 0, r.LocalCommID, ib.KindREQ, ib.RejStaleConn)
		return
	}
	if r.TransportType != ib.TransportRC {
		m.sendREJ(from, tid, 0, r.LocalCommID, ib.KindREQ, ib.RejInvalidTransportType)
		return
	}
	hdr, herr := ib.ParseCMAHeader(r.PrivateData[:])
	var l *listener
	for _, x := range m.listeners {
		if x.serviceID == r.ServiceID && (!x.addr.IsValid() || herr == nil && x.addr == hdr.Dst) {
			l = x
			break
		}
	}
	if l == nil {
		m.stats.NoListenerRejects++
		m.sendREJ(from, tid, 0, r.LocalCommID, ib.KindREQ, ib.RejInvalidServiceID)
		return
	}
	if herr != nil || hdr.Src.Unmap().Is4() != m.cfg.Local.Unmap().Is4() {
		m.sendREJ(from, tid, 0, r.LocalCommID, ib.KindREQ, ib.RejConsumer)
		return
	}
	c := &conn{id: m.newID(), remoteID: r.LocalCommID, peer: from, tid: tid, req: *r, remoteQPN: r.LocalQPN,
		state: StateREQReceived, listener: l.id}
	// The application has the MRA timeout to answer; then the request is
	// rejected (reason 4) and EvTimeout tells.
	c.timerAt = now + ib.TimeoutNanos(m.cfg.MRATimeout)
	m.conns[c.id] = c
	m.byRemote[key] = c.id
	m.emit(Event{Kind: EvRequest, ID: c.id, Listener: l.id, From: from, REQ: *r, Header: hdr,
		PrivateData: reqPrivate(r)})
}

func (m *Machine) onREP(now int64, r *ib.REP, from netip.Addr) {
	c := m.match(r.RemoteCommID, 0, from, false)
	if c == nil {
		return
	}
	switch c.state {
	case StateREQSent:
		c.remoteID, c.rep, c.remoteQPN = r.LocalCommID, *r, r.LocalQPN
		c.state, c.timerAt = StateREPReceived, 0
		m.byRemote[twKey{from, r.LocalCommID}] = c.id
		m.emit(Event{Kind: EvReply, ID: c.id, REP: *r, From: from})
	case StateEstablished:
		if r.LocalCommID != c.remoteID {
			m.stats.Unmatched++
			return
		}
		m.stats.Duplicates++ // our RTU was lost: send it again
		rtu := ib.RTU{LocalCommID: c.id, RemoteCommID: c.remoteID}
		m.send(c.peer, c.id, c.tid, &rtu)
	case StateREPReceived:
		m.stats.Duplicates++ // still bringing the QP up
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onRTU(r *ib.RTU, from netip.Addr) {
	c := m.match(r.RemoteCommID, r.LocalCommID, from, true)
	if c == nil {
		return
	}
	if c.state != StateREPSent {
		m.stats.Duplicates++
		return
	}
	c.state, c.timerAt = StateEstablished, 0
	m.emit(Event{Kind: EvEstablished, ID: c.id})
}

func (m *Machine) onREJ(now int64, r *ib.REJ, from netip.Addr) {
	c := m.conns[r.RemoteCommID]
	if c == nil || c.peer != from || (c.remoteID != 0 && r.LocalCommID != 0 && c.remoteID != r.LocalCommID) {
		m.stats.Unmatched++
		return
	}
	if c.state == StateREQSent && r.Reason == ib.RejInvalidServiceID && now < c.refused {
		// The peer's device is up, its listener not yet: ask again, as
		// the same connection (a REQ of it still on its way may find the
		// listener, whose REP must find the connection).
		m.stats.RefusedResends++
		c.timerAt = now + RefusedResend
		if c.quick == 0 {
			c.quick = RefusedResend // then resent on the quick schedule
			c.quickEnd = now + c.interval
		}
		return
	}
	switch c.state {
	case StateREQSent, StateREPSent, StateREPReceived, StateREQReceived:
		m.emit(Event{Kind: EvRejected, ID: c.id, Reason: r.Reason,
			PrivateData: append([]byte(nil), r.PrivateData[:]...)})
		m.forget(c)
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onMRA(now int64, r *ib.MRA, from netip.Addr) {
	c := m.conns[r.RemoteCommID]
	if c == nil || c.peer != from {
		m.stats.Unmatched++
		return
	}
	if (c.state == StateREQSent && r.MsgMRAed == ib.KindREQ) || (c.state == StateREPSent && r.MsgMRAed == ib.KindREP) {
		// The peer needs longer: wait its service timeout before resending.
		c.timerAt = now + ib.TimeoutNanos(r.ServiceTimeout) + c.interval
		c.quick = 0
		return
	}
	m.stats.Unmatched++
}

func (m *Machine) onDREQ(now int64, tid uint64, r *ib.DREQ, from netip.Addr) {
	c := m.conns[r.RemoteCommID]
	if c == nil || c.peer != from || c.remoteID != r.LocalCommID || c.localQPN != r.RemoteQPN {
		// Unknown (or gone): answer anyway, so that the peer stops
		// resending (Linux's cm_issue_drep).
		m.stats.Unmatched++
		drep := ib.DREP{LocalCommID: r.RemoteCommID, RemoteCommID: r.LocalCommID}
		m.send(from, 0, tid, &drep)
		return
	}
	drep := ib.DREP{LocalCommID: c.id, RemoteCommID: c.remoteID}
	switch c.state {
	case StateEstablished, StateREPSent:
		m.send(from, c.id, tid, &drep)
		m.emit(Event{Kind: EvDisconnected, ID: c.id})
		m.enterTimeWait(now, c)
	case StateDREQSent: // both sides disconnected at once
		m.send(from, c.id, tid, &drep)
		m.emit(Event{Kind: EvClosed, ID: c.id})
		m.enterTimeWait(now, c)
	case StateTimeWait:
		m.stats.Duplicates++
		m.send(from, c.id, tid, &drep)
	default:
		m.stats.Unmatched++
	}
}

func (m *Machine) onDREP(now int64, r *ib.DREP, from netip.Addr) {
	c := m.match(r.RemoteCommID, r.LocalCommID, from, true)
	if c == nil {
		return
	}
	if c.state != StateDREQSent {
		m.stats.Duplicates++
		return
	}
	m.emit(Event{Kind: EvClosed, ID: c.id})
	m.enterTimeWait(now, c)
}

func (m *Machine) enterTimeWait(now int64, c *conn) {
	c.state, c.timerAt, c.expires = StateTimeWait, 0, now+m.cfg.TimeWait
	if c.remoteQPN != 0 {
		m.timewait[twKey{c.peer, c.remoteQPN}] = c.expires
	}
}

func (m *Machine) forget(c *conn) {
	delete(m.conns, c.id)
	if c.remoteID != 0 {
		if id, ok := m.byRemote[twKey{c.peer, c.remoteID}]; ok && id == c.id {
			delete(m.byRemote, twKey{c.peer, c.remoteID})
		}
	}
}

func (m *Machine) emit(ev Event) { m.events = append(m.events, ev) }

func (m *Machine) sendREJ(to netip.Addr, tid uint64, ours, theirs uint32, kind ib.MsgKind, reason uint16) {
	rej := ib.REJ{LocalCommID: ours, RemoteCommID: theirs, MsgRejected: kind, Reason: reason}
	m.stats.Rejects++
	m.send(to, 0, tid, &rej)
}

func (m *Machine) send(to netip.Addr, id uint32, tid uint64, msg ib.Message) [ib.MADSize]byte {
	var mad [ib.MADSize]byte
	h := ib.CMHeader(tid, msg.Attr())
	h.Marshal(mad[:])
	msg.Marshal(mad[ib.HeaderSize:])
	m.sendRaw(to, id, mad)
	return mad
}

func (m *Machine) sendRaw(to netip.Addr, id uint32, mad [ib.MADSize]byte) {
	m.stats.Sent++
	m.events = append(m.events, Event{Kind: EvSend, ID: id, To: to, MAD: mad})
}

// quickResend resends a REQ on the QuickRetry schedule, which doubles up
// to 2 x QuickRetry, until the usual interval has passed since the REQ;
// the usual resends follow.
func (m *Machine) quickResend(now int64, c *conn) {
	m.stats.Resent++
	m.stats.QuickResent++
	m.sendRaw(c.peer, c.id, c.last)
	c.quick = min(2*c.quick, 2*m.cfg.QuickRetry)
	if c.timerAt = now + c.quick; c.timerAt >= c.quickEnd {
		c.quick, c.timerAt = 0, c.quickEnd
	}
}

// sendTimed sends a request that is resent until answered.
func (m *Machine) sendTimed(now int64, c *conn, msg ib.Message, interval int64) {
	c.last = m.send(c.peer, c.id, c.tid, msg)
	c.interval, c.timerAt, c.retries = interval, now+interval, m.cfg.MaxRetries
}

// reqPrivate returns the application's private data of a REQ, after
// rdma_cm's header: exactly as many bytes as the dialer gave when it said
// (ib.REQ.PrivateLen), else all MaxREQPrivate.
func reqPrivate(r *ib.REQ) []byte {
	pd := ib.Private(r.PrivateData[:], r.PrivateLen)
	if len(pd) < ib.CMAHeaderSize {
		pd = r.PrivateData[:]
	}
	return append([]byte(nil), pd[ib.CMAHeaderSize:]...)
}
