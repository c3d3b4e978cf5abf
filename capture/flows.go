package capture

import (
	"time"

	"github.com/goroce/goroce/wire"
)

// Status is how a request message ended.
type Status uint8

// Message outcomes.
const (
	// StatusUnanswered: a reliable (RC/RD) message that no response in the
	// capture acknowledged, NAKed or answered.
	StatusUnanswered Status = iota
	// StatusAcked: acknowledged by an ACK (possibly a coalesced one for a
	// later PSN, or a response that implies it), answered by its last READ
	// RESPONSE, or by an ATOMIC ACKNOWLEDGE.
	StatusAcked
	// StatusNAK: answered by a NAK other than PSN sequence error (Syndrome
	// says which); the requester's QP goes to the error state.
	StatusNAK
	// StatusRNR: the last answer was an RNR NAK and no retry was acked.
	StatusRNR
	// StatusUnreliable: a UC or UD message, which is never answered.
	StatusUnreliable
)

var statusNames = [...]string{"unanswered", "acked", "NAK", "RNR NAK", "unreliable"}

// String returns "unanswered", "acked", "NAK", "RNR NAK" or "unreliable".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "Status(?)"
}

// Message is one request message of a flow: the packets from FIRST to LAST
// (or one ONLY packet, READ REQUEST or atomic) and what answered it.
type Message struct {
	Transport wire.Transport
	Op        wire.Operation // OpSend, OpWrite, OpReadRequest, OpCompareSwap or OpFetchAdd
	Opcode    wire.Opcode    // opcode of the first packet seen

	// FirstPSN and LastPSN are the PSNs the message occupies: its packets,
	// or for an RDMA READ the PSNs it reserves for its responses.
	FirstPSN, LastPSN wire.PSN
	// Packets counts distinct request packets (retransmissions excluded).
	Packets int
	// Bytes is the payload of a SEND or RDMA WRITE (retransmissions
	// excluded), or the length an RDMA READ asks for.
	Bytes int
	// Partial: the capture holds no FIRST packet of the message (it begins
	// with a MIDDLE or LAST). Complete: it holds the packet that ends it.
	Partial, Complete bool

	// Header values, as carried by the message's packets.
	VA      uint64 // RETH or AtomicETH
	RKey    uint32 // RETH or AtomicETH
	DMALen  uint32 // RETH
	HasImm  bool
	Imm     uint32
	HasInv  bool
	InvRKey uint32 // IETH
	SwapAdd uint64 // AtomicETH: swap (COMPARE SWAP) or add (FETCH ADD)
	Compare uint64 // AtomicETH
	QKey    uint32 // DETH (UD)
	SrcQP   wire.QPN

	// Answer.
	HasOrig     bool
	Orig        uint64 // ATOMIC ACKNOWLEDGE: the remote value before the operation
	ReadBytes   int    // READ: payload of the distinct READ RESPONSE packets seen
	ReadPackets int    // READ: distinct READ RESPONSE packets seen

	FirstFrame, LastFrame int       // frames of the first and last request packet
	Start                 time.Time // time of the first request packet

	Retransmissions int // times (a part of) the message was sent again
	RNRNAKs         int // RNR NAKs received for it
	RNRTimer        time.Duration
	SeqNAKs         int // PSN sequence error NAKs that pointed into it

	Status      Status
	Syndrome    wire.Syndrome // of the NAK or RNR NAK that set Status; 0 otherwise
	AnswerFrame int           // frame of the response that set Status
	Latency     time.Duration // from Start to that response

	spanKnown bool     // READ: LastPSN is final
	retxLast  wire.PSN // PSN of the previous retransmitted packet
	inRetx    bool
	readHigh  wire.PSN // READ: highest response PSN seen
	readSeen  bool
}

// Contains reports whether the message occupies PSN q.
func (m *Message) Contains(q wire.PSN) bool {
	return !q.Before(m.FirstPSN) && !q.After(m.lastPSN())
}

// lastPSN is LastPSN, or for a READ whose span is not known yet the largest
// span it can have (one response packet per 256 bytes, the smallest MTU).
func (m *Message) lastPSN() wire.PSN {
	if m.Op == wire.OpReadRequest && !m.spanKnown {
		return m.FirstPSN.Add(readSpan(m.DMALen, 256) - 1)
	}
	return m.LastPSN
}

// final reports whether the message's fate is decided.
func (m *Message) final() bool {
	return m.Status == StatusAcked || m.Status == StatusNAK || m.Status == StatusUnreliable
}

// readSpan returns how many PSNs an RDMA READ of n bytes reserves at path
// MTU pmtu: one per response packet, at least one.
func readSpan(n uint32, pmtu int) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((uint64(n) + uint64(pmtu) - 1) / uint64(pmtu))
}

// FlowStats counts the packets of one flow.
type FlowStats struct {
	Packets         int // RoCEv2 packets (malformed included)
	Messages        int // request messages begun
	Bytes           int // payload bytes of the packets taking part in messages, retransmissions included
	Retransmissions int // request packets whose PSN had been seen before
	NAKs            int // NAKs sent (PSN sequence errors included)
	RNRNAKs         int // RNR NAKs sent
	ICRCBad         int // packets failing the ICRC check
	Malformed       int // packets with a framing, parsing or path-MTU problem
	CNPs            int // congestion notification packets
	Unmatched       int // responses that answer no request seen
}

// Flow is the traffic of one FlowKey. A flow plays two roles: the requests
// Key.Src sends to queue pair Key.DestQP (Messages), and the responses
// Key.Src sends to the requester whose QP is Key.DestQP (paired with the
// request flow Answers).
type Flow struct {
	Key       FlowKey
	Transport wire.Transport // of the first request, or response, seen
	// PMTU is the path MTU the decoder used for the flow's packets; 0 when
	// unknown (a READ then uses its paired flow's).
	PMTU     int
	Messages []*Message
	// Answers is the request flow this flow's responses answer; AnsweredBy
	// the flow carrying the responses to this flow's requests.
	Answers, AnsweredBy *Flow
	Stats               FlowStats

	seen     bool     // a request was seen
	expected wire.PSN // PSN after the last new request packet
	cur      *Message // message awaiting its MIDDLE/LAST packets
	ackIdx   int      // Messages[:ackIdx] are covered by a positive ACK
}

// Totals counts the records of a capture.
type Totals struct {
	Records     int // records read
	RoCE        int // RoCEv2 packets
	Skipped     int // records skipped: not UDP to port 4791
	Unsupported int // records skipped: link type not understood
	Malformed   int // RoCEv2 packets with a framing, parsing or path-MTU problem
	ICRCBad     int // RoCEv2 packets failing the ICRC check
	Bad         int // RoCEv2 packets that are malformed or fail the ICRC check
}

// Add counts one decoded record.
func (t *Totals) Add(p *Packet) {
	t.Records++
	switch {
	case !p.LinkType.Supported():
		t.Unsupported++
		return
	case !p.RoCE:
		t.Skipped++
		return
	}
	t.RoCE++
	if p.Err != nil {
		t.Malformed++
	}
	if p.ICRC == ICRCBad {
		t.ICRCBad++
	}
	if p.Bad() {
		t.Bad++
	}
}

// Flows groups RoCEv2 packets into flows and messages and matches
// responses with the requests they answer (see the package documentation
// for the rules). Add packets in capture order.
type Flows struct {
	Totals Totals
	flows  []*Flow
	byKey  map[FlowKey]*Flow
}

// NewFlows returns an empty model.
func NewFlows() *Flows { return &Flows{byKey: make(map[FlowKey]*Flow)} }

// Flows returns the flows in the order their first packet appeared.
func (fs *Flows) Flows() []*Flow { return fs.flows }

// Flow returns the flow with key k, or nil.
func (fs *Flows) Flow(k FlowKey) *Flow { return fs.byKey[k] }

func (fs *Flows) flow(k FlowKey) *Flow {
	f := fs.byKey[k]
	if f == nil {
		f = &Flow{Key: k}
		fs.byKey[k] = f
		fs.flows = append(fs.flows, f)
	}
	return f
}

// Add adds a decoded record. Packets that are not RoCEv2 are only counted;
// malformed ones and ones failing the ICRC are counted against their flow
// but take no part in messages (a receiver drops them), except well-formed
// requests that break a responder rule (wire.ErrInvalidRequest).
func (fs *Flows) Add(p *Packet) {
	fs.Totals.Add(p)
	k, ok := p.Key()
	if !ok {
		return
	}
	f := fs.flow(k)
	f.Stats.Packets++
	if p.Err != nil {
		f.Stats.Malformed++
	}
	if p.ICRC == ICRCBad {
		f.Stats.ICRCBad++
	}
	if !p.Trusted() {
		return
	}
	info := p.Wire.Info
	f.Stats.Bytes += p.Wire.PayloadLen
	if f.PMTU == 0 && p.PMTU > 0 {
		f.PMTU = p.PMTU
	}
	if f.Transport == wire.TransportNone {
		f.Transport = info.Transport
	}
	switch {
	case info.Transport == wire.TransportCNP:
		f.Stats.CNPs++
	case info.Request:
		f.request(p)
	default:
		fs.response(f, p)
	}
}

// pmtu returns the flow's path MTU, or its paired flow's.
func (f *Flow) pmtu() int {
	if f.PMTU == 0 && f.AnsweredBy != nil {
		return f.AnsweredBy.PMTU
	}
	return f.PMTU
}

// reliable reports whether the transport has responses and retransmissions.
func reliable(t wire.Transport) bool { return t == wire.TransportRC || t == wire.TransportRD }

func (f *Flow) request(p *Packet) {
	info := p.Wire.Info
	bth := p.Wire.BTH()
	psn := bth.PSN()
	if f.seen && reliable(info.Transport) && psn.Before(f.expected) {
		f.Stats.Retransmissions++
		if m := f.find(psn); m != nil {
			// One go-back-N pass resends increasing PSNs; a PSN not after
			// the previous resent one starts a new pass.
			if !m.inRetx || !psn.After(m.retxLast) {
				m.Retransmissions++
			}
			m.inRetx, m.retxLast = true, psn
		}
		return
	}
	gap := f.seen && psn != f.expected
	if n := len(f.Messages); n > 0 {
		if m := f.Messages[n-1]; m.Op == wire.OpReadRequest && !m.spanKnown && psn.After(m.FirstPSN) && m.Contains(psn.Sub(1)) {
			m.LastPSN, m.spanKnown = psn.Sub(1), true
		}
	}
	f.seen = true
	f.expected = psn.Add(1)
	pos := info.Position
	var m *Message
	switch {
	case pos == wire.PosMiddle || pos == wire.PosLast:
		if f.cur != nil && f.cur.Op == info.Operation && !gap {
			m = f.cur
			m.addPacket(p)
		} else {
			m = f.newMessage(p)
			m.Partial = true
		}
		if pos == wire.PosLast {
			m.Complete = true
			f.cur = nil
		} else {
			f.cur = m
		}
	default: // FIRST, ONLY, or a single-packet operation
		m = f.newMessage(p)
		f.cur = nil
		if pos == wire.PosFirst {
			f.cur = m
		} else {
			m.Complete = true
		}
	}
	if m.Op == wire.OpReadRequest {
		if mtu := f.pmtu(); mtu > 0 {
			m.LastPSN, m.spanKnown = psn.Add(readSpan(m.DMALen, mtu)-1), true
		}
		f.expected = m.lastPSN().Add(1)
		if !m.spanKnown {
			f.expected = psn.Add(1) // corrected by the next request or the responses
		}
	}
}

func (f *Flow) newMessage(p *Packet) *Message {
	info := p.Wire.Info
	m := &Message{
		Transport: info.Transport, Op: info.Operation, Opcode: p.Wire.Opcode(),
		FirstPSN: p.Wire.BTH().PSN(), FirstFrame: p.Index, Start: p.Time,
	}
	if !reliable(info.Transport) {
		m.Status = StatusUnreliable
	}
	if h := p.Wire.RETH(); h != nil {
		m.VA, m.RKey, m.DMALen = h.VA(), h.RKey(), h.DMALen()
		if info.Operation == wire.OpReadRequest {
			m.Bytes = int(h.DMALen())
		}
	}
	if h := p.Wire.AtomicETH(); h != nil {
		m.VA, m.RKey, m.SwapAdd, m.Compare = h.VA(), h.RKey(), h.SwapAdd(), h.Compare()
	}
	if h := p.Wire.DETH(); h != nil {
		m.QKey, m.SrcQP = h.QKey(), h.SrcQP()
	}
	m.addPacket(p)
	f.Messages = append(f.Messages, m)
	f.Stats.Messages++
	return m
}

func (m *Message) addPacket(p *Packet) {
	m.Packets++
	m.LastPSN = p.Wire.BTH().PSN()
	m.LastFrame = p.Index
	if m.Op != wire.OpReadRequest {
		m.Bytes += p.Wire.PayloadLen
	}
	if h := p.Wire.ImmDt(); h != nil {
		m.HasImm, m.Imm = true, h.Imm()
	}
	if h := p.Wire.IETH(); h != nil {
		m.HasInv, m.InvRKey = true, h.RKey()
	}
}

// find returns the message occupying PSN q, or nil.
func (f *Flow) find(q wire.PSN) *Message {
	for i := len(f.Messages) - 1; i >= 0; i-- {
		m := f.Messages[i]
		if m.Contains(q) {
			return m
		}
		if m.lastPSN().Before(q) {
			return nil
		}
	}
	return nil
}

// outstanding reports whether PSN q lies between the oldest message not yet
// covered by an ACK and the end of the newest one.
func (f *Flow) outstanding(q wire.PSN) bool {
	n := len(f.Messages)
	if n == 0 {
		return false
	}
	lo := f.Messages[n-1].FirstPSN
	for i := min(f.ackIdx, n-1); i < n; i++ {
		if !f.Messages[i].final() {
			lo = f.Messages[i].FirstPSN
			break
		}
	}
	return !q.Before(lo) && !q.After(f.Messages[n-1].lastPSN())
}

// ackThrough marks the SEND and RDMA WRITE messages that end at or before q
// as acknowledged (ACKs are cumulative; READs and atomics need their own
// responses).
func (f *Flow) ackThrough(q wire.PSN, p *Packet) {
	i := f.ackIdx
	for ; i < len(f.Messages); i++ {
		m := f.Messages[i]
		if m.lastPSN().After(q) {
			break
		}
		if (m.Op == wire.OpSend || m.Op == wire.OpWrite) && !m.final() {
			m.answer(StatusAcked, p)
		}
	}
	f.ackIdx = i
}

func (m *Message) answer(s Status, p *Packet) {
	m.Status, m.AnswerFrame, m.Latency, m.Syndrome = s, p.Index, p.Time.Sub(m.Start), 0
}

// pairing finds the request flow that a response flow answers: one in the
// opposite IP direction, not paired yet, whose outstanding PSNs (or, failing
// that, any of whose messages) contain the response's PSN.
func (fs *Flows) pairing(rf *Flow, q wire.PSN) *Flow {
	var fallback *Flow
	for _, f := range fs.flows {
		if f.AnsweredBy != nil || len(f.Messages) == 0 || !reliable(f.Messages[0].Transport) ||
			f.Key.Src != rf.Key.Dst || f.Key.Dst != rf.Key.Src {
			continue
		}
		if f.outstanding(q) {
			return f
		}
		if fallback == nil && f.find(q) != nil {
			fallback = f
		}
	}
	return fallback
}

// response takes a response packet of flow rf: it counts NAKs and RNR
// NAKs, pairs rf with the request flow it answers on its first response,
// and applies the response to that flow's messages. A response that
// answers nothing counts as unmatched.
func (fs *Flows) response(rf *Flow, p *Packet) {
	psn := p.Wire.BTH().PSN()
	if aeth := p.Wire.AETH(); aeth != nil && p.Wire.Info.Operation == wire.OpAcknowledge {
		switch s := aeth.Syndrome(); {
		case s.IsNAK():
			rf.Stats.NAKs++
		case s.IsRNR():
			rf.Stats.RNRNAKs++
		}
	}
	q := rf.Answers
	if q == nil {
		if q = fs.pairing(rf, psn); q == nil {
			rf.Stats.Unmatched++
			return
		}
		rf.Answers, q.AnsweredBy = q, rf
	}
	var matched bool
	switch p.Wire.Info.Operation {
	case wire.OpAcknowledge:
		matched = q.answerAck(p, psn)
	case wire.OpReadResponse:
		matched = q.answerRead(p, psn)
	case wire.OpAtomicAcknowledge:
		matched = q.answerAtomic(p, psn)
	}
	if !matched {
		rf.Stats.Unmatched++
	}
}

// answerAck applies the ACK, NAK or RNR NAK p, whose PSN is psn, to the
// flow's requests. It reports whether p answers a message: an ACK always
// does (even when it acknowledges none), a NAK only when a message
// occupies psn.
func (f *Flow) answerAck(p *Packet, psn wire.PSN) bool {
	s := p.Wire.AETH().Syndrome()
	if s.IsACK() {
		f.ackThrough(psn, p)
		return true
	}
	// A NAK or RNR NAK for PSN q acknowledges everything before it.
	f.ackThrough(psn.Sub(1), p)
	m := f.find(psn)
	if m == nil {
		return false
	}
	switch {
	case s.IsRNR():
		m.RNRNAKs++
		m.RNRTimer = wire.RNRTimer(s.Value())
		if !m.final() {
			m.answer(StatusRNR, p)
			m.Syndrome = s
		}
	case s == wire.NAKPSNSequence:
		m.SeqNAKs++ // the requester goes back to this PSN
	default:
		if !m.final() {
			m.answer(StatusNAK, p)
			m.Syndrome = s
		}
	}
	return true
}

// answerRead applies a READ RESPONSE packet p with PSN psn to the READ
// request of the flow that occupies psn: it counts the packet once, learns
// the READ's span from its first or last response, and marks the READ
// acked by its last. It reports false when no READ occupies psn.
func (f *Flow) answerRead(p *Packet, psn wire.PSN) bool {
	m := f.find(psn)
	if m == nil || m.Op != wire.OpReadRequest {
		return false
	}
	f.ackThrough(m.FirstPSN.Sub(1), p)
	pos := p.Wire.Info.Position
	if !m.spanKnown && pos == wire.PosFirst && wire.ValidMTU(p.Wire.PayloadLen) {
		m.LastPSN, m.spanKnown = m.FirstPSN.Add(readSpan(m.DMALen, p.Wire.PayloadLen)-1), true
	}
	if !m.readSeen || psn.After(m.readHigh) {
		m.readSeen, m.readHigh = true, psn
		m.ReadPackets++
		m.ReadBytes += p.Wire.PayloadLen
	}
	if pos == wire.PosLast || pos == wire.PosOnly {
		if !m.spanKnown {
			m.LastPSN, m.spanKnown = psn, true
		}
		if !m.final() {
			m.answer(StatusAcked, p)
		}
	}
	return true
}

// answerAtomic applies an ATOMIC ACKNOWLEDGE p with PSN psn to the atomic
// request of the flow that occupies psn, recording the original remote
// value. It reports false when no atomic occupies psn.
func (f *Flow) answerAtomic(p *Packet, psn wire.PSN) bool {
	m := f.find(psn)
	if m == nil || (m.Op != wire.OpCompareSwap && m.Op != wire.OpFetchAdd) {
		return false
	}
	f.ackThrough(m.FirstPSN.Sub(1), p)
	m.HasOrig, m.Orig = true, p.Wire.AtomicAckETH().Orig()
	if !m.final() {
		m.answer(StatusAcked, p)
	}
	return true
}
