package engine

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestHostileInput's world: the device under test is engine b of a link
// (10.0.0.2); its QPs are connected to the peer, engine a's address, whose
// packets the test forges; the intruder is an address no QP is connected to.
var (
	hostilePeer     = netip.MustParseAddr("10.0.0.1")
	hostileIntruder = netip.MustParseAddr("10.0.0.7")
)

const (
	hostileCanary            = 0xA5
	hostileCanaryWord uint64 = 0xA5A5A5A5A5A5A5A5
	hostileAccess            = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
)

// hostile is TestHostileInput's world: engine dev, the responses it sent
// not yet read, the asynchronous events it raised, and its memory: one
// buffer filled with a canary, parts of it registered.
type hostile struct {
	t         *testing.T
	l         *link
	dev       *Engine
	pd        uint32
	otherPD   uint32
	mem       []byte
	all       *MR // [16K, 32K): every access right
	ro        *MR // [40K, 44K): REMOTE_READ only
	wo        *MR // [48K, 52K): REMOTE_WRITE only
	other     *MR // [56K, 60K): every right, another PD
	resps     []hostileSeen
	events    []AsyncEvent
	buf       []byte
	payload16 []byte // sixteen bytes of payload
}

type hostileSeen struct {
	dst wire.QPN
	r   hostileResp
}

func newHostile(t *testing.T) *hostile {
	l := newLink(t)
	h := &hostile{t: t, l: l, dev: l.b, mem: make([]byte, 64<<10), buf: make([]byte, wire.MaxPMTU+128), payload16: []byte("sixteen bytes!!!")}
	for i := range h.mem {
		h.mem[i] = hostileCanary
	}
	h.dev.cfg.OnAsyncEvent = func(ev AsyncEvent) { h.events = append(h.events, ev) }
	h.pd, h.otherPD = h.dev.AllocPD(), h.dev.AllocPD()
	lw := verbs.AccessLocalWrite
	reg := func(pd uint32, off, n int, access verbs.AccessFlags) *MR {
		mr, err := h.dev.MRs.Register(h.mem[off:off+n:off+n], access, pd)
		must(t, err)
		return mr
	}
	h.all = reg(h.pd, 16<<10, 16<<10, hostileAccess)
	h.ro = reg(h.pd, 40<<10, 4<<10, lw|verbs.AccessRemoteRead)
	h.wo = reg(h.pd, 48<<10, 4<<10, lw|verbs.AccessRemoteWrite)
	h.other = reg(h.otherPD, 56<<10, 4<<10, hostileAccess)
	return h
}

// hostileQP is a QP of the device connected to the peer, which plays the
// remote QP peerQPN.
type hostileQP struct {
	qp      *QP
	cq      *CQ
	peerQPN wire.QPN
	epsn    wire.PSN // the PSN the device expects next
}

func (h *hostile) newQP(typ verbs.QPType) (*QP, *CQ) {
	h.t.Helper()
	cq := NewCQ(16)
	qp, err := h.dev.CreateQP(&QPInit{Type: typ, PD: h.pd, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(h.t, err)
	return qp, cq
}

func (h *hostile) rcQP(peerQPN wire.QPN, access verbs.AccessFlags) *hostileQP {
	t := h.t
	t.Helper()
	qp, cq := h.newQP(verbs.QPTRC)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: uint32(peerQPN), RQPSN: 0x10,
		MaxDestRdAtomic: 4, MinRNRTimer: 5, AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(hostilePeer), PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x50, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	return &hostileQP{qp: qp, cq: cq, peerQPN: peerQPN, epsn: 0x10}
}

func (h *hostile) udQP(qkey uint32) *hostileQP {
	t := h.t
	t.Helper()
	qp, cq := h.newQP(verbs.QPTUD)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: qkey}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN))
	return &hostileQP{qp: qp, cq: cq}
}

// forge builds a transport packet from address from to the device, ICRC
// included.
func (h *hostile) forge(from netip.Addr, hdr wire.Header, payload []byte) []byte {
	h.t.Helper()
	if hdr.PKey == 0 {
		hdr.PKey = wire.DefaultPKey
	}
	fl := wire.Flow{Src: from, Dst: h.dev.Local(), SrcPort: wire.RoCEv2Port}
	b, err := wire.AppendDatagram(nil, &fl, &hdr, payload)
	if err != nil {
		h.t.Fatalf("building %v: %v", hdr.Opcode, err)
	}
	return b
}

// send gives the device packets from address from, then takes every packet
// it has to send (a QP in ERROR flushes its work as it is asked for one).
func (h *hostile) send(from netip.Addr, pkts ...[]byte) {
	for _, p := range pkts {
		h.dev.Input(h.l.now, p, from, wire.RoCEv2Port)
	}
	for {
		n, _, ok := h.dev.Output(h.l.now, h.buf)
		if !ok {
			return
		}
		var p wire.Packet
		if err := wire.Parse(h.buf[:n], &p); err != nil {
			h.t.Fatalf("the device sent a malformed packet: %v", err)
		}
		r := hostileResp{op: p.Opcode(), psn: p.BTH().PSN()}
		if a := p.AETH(); a != nil {
			r.syn = a.Syndrome()
		}
		if a := p.AtomicAckETH(); a != nil {
			r.orig = a.Orig()
		}
		h.resps = append(h.resps, hostileSeen{p.BTH().DestQP(), r})
	}
}

// hostileResp is what the device answered.
type hostileResp struct {
	op   wire.Opcode
	psn  wire.PSN
	syn  wire.Syndrome
	orig uint64 // ATOMIC ACKNOWLEDGE
}

// response returns the device's next response to the peer QP peerQPN; ok
// is false when it sent none.
func (h *hostile) response(peerQPN wire.QPN) (r hostileResp, ok bool) {
	for i, s := range h.resps {
		if s.dst == peerQPN {
			h.resps = append(h.resps[:i], h.resps[i+1:]...)
			return s.r, true
		}
	}
	return r, false
}

// counter returns the engine counter named field.
func (h *hostile) counter(field string) uint64 {
	return reflect.ValueOf(h.dev.Stats()).FieldByName(field).Uint()
}

// hostileCase is one bad input and the outcome it must have.
type hostileCase struct {
	name string
	// qp makes the QP under attack (default: an RC QP with every access
	// right, peer QPN from the case number).
	qp func(h *hostile, peerQPN wire.QPN) *hostileQP
	// prep runs before the attack (post receives, a first valid packet).
	prep func(h *hostile, q *hostileQP)
	// attack returns the packets to send and the address they come from
	// (the zero address: the peer).
	attack func(h *hostile, q *hostileQP) ([][]byte, netip.Addr)
	// Outcome: the response the device sends the peer (nil: none), the
	// counter that must grow, the QP's state after, the completions on
	// its CQ.
	resp    *hostileResp
	counter string
	state   verbs.QPState
	wcs     []verbs.WCStatus
	check   func(h *hostile, q *hostileQP) // more checks
}

func syn(op wire.Opcode, s wire.Syndrome) *hostileResp { return &hostileResp{op: op, syn: s} }

var (
	nakAccess  = syn(wire.RCAcknowledge, wire.NAKRemoteAccess)
	nakInvalid = syn(wire.RCAcknowledge, wire.NAKInvalidRequest)
	ack        = syn(wire.RCAcknowledge, wire.ACKUnlimited)
)

// write returns a WRITE ONLY packet at the QP's expected PSN.
func (h *hostile) write(q *hostileQP, rkey uint32, va uint64, dmaLen uint32, payload []byte) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCWriteOnly, DestQP: q.qp.num, PSN: q.epsn, AckReq: true,
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen}}, payload)
}

func (h *hostile) read(q *hostileQP, rkey uint32, va uint64, n uint32) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCReadRequest, DestQP: q.qp.num, PSN: q.epsn, AckReq: true,
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: n}}, nil)
}

func (h *hostile) fetchAdd(q *hostileQP, rkey uint32, va uint64, add uint64) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCFetchAdd, DestQP: q.qp.num, PSN: q.epsn, AckReq: true,
		AtomicETH: wire.AtomicFields{VA: va, RKey: rkey, SwapAdd: add}}, nil)
}

func (h *hostile) sendOp(q *hostileQP, op wire.Opcode, payload []byte) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: op, DestQP: q.qp.num, PSN: q.epsn, AckReq: true}, payload)
}

func (h *hostile) postRecv(q *hostileQP, off, n int) {
	h.t.Helper()
	_, err := q.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{{Addr: h.all.Addr() + uint64(off), Length: uint32(n), LKey: h.all.LKey()}}}})
	must(h.t, err)
}

func one(from netip.Addr, pkts ...[]byte) ([][]byte, netip.Addr) { return pkts, from }

// hostileCases are the bad packets a broken or malicious peer can send,
// and what the device must do with each. docs/faults.md tabulates them.
func hostileCases(h *hostile) []hostileCase {
	return slices.Concat(h.memoryCases(), h.malformedCases(), h.sequenceCases(), h.droppedCases(), h.udCases(), h.verbs33Cases())
}

// peer returns packets from the peer, for an attack.
func peer(pkts ...[]byte) ([][]byte, netip.Addr) { return pkts, netip.Addr{} }

// rcWith makes RC QPs with the access rights given.
func rcWith(access verbs.AccessFlags) func(*hostile, wire.QPN) *hostileQP {
	return func(h *hostile, n wire.QPN) *hostileQP { return h.rcQP(n, access) }
}

// memoryCases: memory protection, the responder's R_Key, PD, access and
// bounds checks.
func (h *hostile) memoryCases() []hostileCase {
	all, ro, wo, other, payload16 := h.all, h.ro, h.wo, h.other, h.payload16
	return []hostileCase{
		{name: "write_unknown_rkey", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, 0xDEAD00, all.Addr(), 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_deregistered_rkey", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			mr, err := h.dev.MRs.Register(h.mem[36<<10:37<<10], hostileAccess, h.pd)
			must(h.t, err)
			key, addr := mr.RKey(), mr.Addr()
			must(h.t, mr.Deregister())
			return peer(h.write(q, key, addr, 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_rkey_of_another_pd", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, other.RKey(), other.Addr(), 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_to_read_only_mr", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, ro.RKey(), ro.Addr(), 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_past_the_end", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr()+uint64(len(all.Buf()))-8, 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_before_the_start", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr()-8, 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_address_wraps_around", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), ^uint64(0)-7, 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_length_wraps_around", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			// A WRITE ONLY whose DMA length is not its payload's: refused
			// before the range is looked at.
			return peer(h.write(q, all.RKey(), all.Addr()+8, ^uint32(0)-3, payload16))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_first_length_past_the_end", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCWriteFirst, DestQP: q.qp.num, PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr() + 8, RKey: all.RKey(), DMALen: ^uint32(0) - 3}}, make([]byte, 1024)))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_to_qp_without_remote_write", qp: rcWith(verbs.AccessRemoteRead | verbs.AccessRemoteAtomic),
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.write(q, all.RKey(), all.Addr(), 16, payload16))
			}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "read_from_write_only_mr", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.read(q, wo.RKey(), wo.Addr(), 16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "read_past_the_end", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.read(q, all.RKey(), all.Addr()+1, uint32(len(all.Buf()))))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "read_from_qp_without_remote_read", qp: rcWith(verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic),
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.read(q, all.RKey(), all.Addr(), 16))
			}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_on_mr_without_remote_atomic", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.fetchAdd(q, wo.RKey(), wo.Addr(), 1))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_misaligned", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.fetchAdd(q, all.RKey(), all.Addr()+4, 1))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_past_the_end", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.fetchAdd(q, all.RKey(), all.Addr()+uint64(len(all.Buf())), 1))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_on_qp_without_remote_atomic", qp: rcWith(verbs.AccessRemoteWrite | verbs.AccessRemoteRead),
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.fetchAdd(q, all.RKey(), all.Addr(), 1))
			}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
	}
}

// malformedCases: malformed requests: invalid request NAKs.
func (h *hostile) malformedCases() []hostileCase {
	all, payload16 := h.all, h.payload16
	return []hostileCase{
		{name: "write_payload_longer_than_dma_length", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr(), 8, payload16))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "write_payload_shorter_than_dma_length", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr(), 32, payload16))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "payload_over_path_mtu", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr(), 2048, make([]byte, 2048)))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "send_middle_without_first", prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 64) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.sendOp(q, wire.RCSendMiddle, make([]byte, 1024)))
			}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr, wcs: []verbs.WCStatus{verbs.WCWRFlushErr}},
		{name: "write_first_inside_a_send", prep: func(h *hostile, q *hostileQP) {
			h.postRecv(q, 0, 4096)
			h.send(hostilePeer, h.sendOp(q, wire.RCSendFirst, make([]byte, 1024)))
			if r, ok := h.response(q.peerQPN); !ok || r.syn != wire.ACKUnlimited {
				h.t.Fatalf("SEND FIRST: response %+v %v", r, ok)
			}
			q.epsn++
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCWriteFirst, DestQP: q.qp.num, PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr(), RKey: all.RKey(), DMALen: 2048}}, make([]byte, 1024)))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr, wcs: []verbs.WCStatus{verbs.WCWRFlushErr}},
		{name: "send_longer_than_the_receive", prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 8) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.sendOp(q, wire.RCSendOnly, payload16))
			}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr, wcs: []verbs.WCStatus{verbs.WCLocLenErr}},
		{name: "reserved_opcode", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			p := h.sendOp(q, wire.RCSendOnly, payload16)
			p[0] = 0x1F // reserved in the RC opcode space
			fl := wire.Flow{Src: hostilePeer, Dst: h.dev.Local(), SrcPort: wire.RoCEv2Port}
			if err := fl.SetDatagramICRC(p); err != nil {
				h.t.Fatal(err)
			}
			return peer(p)
		}, counter: "MalformedDrops", state: verbs.QPSRTS},
	}
}

// sequenceCases: flow control and sequence: recoverable, the QP stays in RTS.
func (h *hostile) sequenceCases() []hostileCase {
	all, payload16 := h.all, h.payload16
	return []hostileCase{
		{name: "send_without_a_receive", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.sendOp(q, wire.RCSendOnly, payload16))
		}, resp: syn(wire.RCAcknowledge, wire.RNRNAK(5)), counter: "RNRSent", state: verbs.QPSRTS},
		{name: "psn_ahead", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			q.epsn += 5
			p1 := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			q.epsn++
			p2 := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			q.epsn -= 6
			return peer(p1, p2) // one NAK for the gap, not two
		}, resp: &hostileResp{op: wire.RCAcknowledge, syn: wire.NAKPSNSequence, psn: 0x10}, counter: "OutOfSequence", state: verbs.QPSRTS,
			check: func(h *hostile, q *hostileQP) {
				if r, ok := h.response(q.peerQPN); ok {
					h.t.Errorf("a second response %+v for the same gap", r)
				}
			}},
		{name: "duplicate_write", prep: func(h *hostile, q *hostileQP) {
			h.send(hostilePeer, h.write(q, all.RKey(), all.Addr()+4096, 16, payload16))
			if r, ok := h.response(q.peerQPN); !ok || r.syn != wire.ACKUnlimited {
				h.t.Fatalf("first WRITE: response %+v %v", r, ok)
			}
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr()+4096, 16, []byte("SIXTEEN BYTES!!!")))
		}, resp: ack, counter: "Duplicates", state: verbs.QPSRTS, check: func(h *hostile, q *hostileQP) {
			if got := string(all.Buf()[4096 : 4096+16]); got != string(payload16) {
				h.t.Errorf("memory %q after the duplicate WRITE, want the first WRITE's %q", got, payload16)
			}
		}},
		{name: "duplicate_atomic", prep: func(h *hostile, q *hostileQP) {
			h.send(hostilePeer, h.fetchAdd(q, all.RKey(), all.Addr()+8192, 5))
			if r, ok := h.response(q.peerQPN); !ok || r.op != wire.RCAtomicAcknowledge || r.orig != hostileCanaryWord {
				h.t.Fatalf("first FETCH_ADD: response %+v %v", r, ok)
			}
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.fetchAdd(q, all.RKey(), all.Addr()+8192, 5))
		}, resp: &hostileResp{op: wire.RCAtomicAcknowledge, syn: wire.ACKUnlimited, psn: 0x10, orig: hostileCanaryWord}, counter: "Duplicates", state: verbs.QPSRTS,
			check: func(h *hostile, q *hostileQP) {
				if v := binary.NativeEndian.Uint64(all.Buf()[8192:]); v != hostileCanaryWord+5 {
					h.t.Errorf("atomic word %#x after the duplicate FETCH_ADD, want %#x (executed once)", v, hostileCanaryWord+5)
				}
			}},
		{name: "response_for_a_psn_never_sent", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCReadResponseOnly, DestQP: q.qp.num, PSN: 0x60,
				AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited}}, payload16))
		}, counter: "RxPackets", state: verbs.QPSRTS},
	}
}

// droppedCases: dropped before any QP sees them.
func (h *hostile) droppedCases() []hostileCase {
	all, payload16 := h.all, h.payload16
	return []hostileCase{
		{name: "bad_icrc", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			p := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			p[len(p)-8] ^= 0x10 // a payload bit
			return peer(p)
		}, counter: "ICRCDrops", state: verbs.QPSRTS},
		{name: "truncated_bth", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr(), 16, payload16)[:8])
		}, counter: "MalformedDrops", state: verbs.QPSRTS},
		{name: "truncated_reth", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.write(q, all.RKey(), all.Addr(), 16, payload16)[:wire.BTHLen+8])
		}, counter: "MalformedDrops", state: verbs.QPSRTS},
		{name: "wrong_pkey", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCWriteOnly, DestQP: q.qp.num, PSN: q.epsn, PKey: 0x1234,
				RETH: wire.RETHFields{VA: all.Addr(), RKey: all.RKey(), DMALen: 16}}, payload16))
		}, counter: "PKeyDrops", state: verbs.QPSRTS},
		{name: "unknown_qpn", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCSendOnly, DestQP: 0xABCDE, PSN: q.epsn}, payload16))
		}, counter: "UnknownQPDrops", state: verbs.QPSRTS},
		{name: "qp_in_reset", qp: func(h *hostile, n wire.QPN) *hostileQP {
			qp, err := h.dev.CreateQP(&QPInit{Type: verbs.QPTRC, PD: h.pd, SendCQ: NewCQ(4), RecvCQ: NewCQ(4), Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			must(h.t, err)
			return &hostileQP{qp: qp, peerQPN: n, epsn: 0x10}
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.sendOp(q, wire.RCSendOnly, payload16))
		}, counter: "UnknownQPDrops", state: verbs.QPSReset},
		{name: "rc_packet_from_another_address", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return one(hostileIntruder, h.forge(hostileIntruder, wire.Header{Opcode: wire.RCWriteOnly, DestQP: q.qp.num, PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr(), RKey: all.RKey(), DMALen: 16}}, payload16))
		}, counter: "WrongPeerDrops", state: verbs.QPSRTS},
		{name: "ud_opcode_to_an_rc_qp", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UDSendOnly, DestQP: q.qp.num, PSN: q.epsn,
				DETH: wire.DETHFields{QKey: 1, SrcQP: 5}}, payload16))
		}, counter: "MalformedDrops", state: verbs.QPSRTS},
	}
}

// udCases: UD QPs.
func (h *hostile) udCases() []hostileCase {
	payload16 := h.payload16
	return []hostileCase{
		{name: "rc_opcode_to_a_ud_qp", qp: func(h *hostile, _ wire.QPN) *hostileQP { return h.udQP(0x1111) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.sendOp(q, wire.RCSendOnly, payload16))
			}, counter: "MalformedDrops", state: verbs.QPSRTS},
		{name: "ud_wrong_qkey", qp: func(h *hostile, _ wire.QPN) *hostileQP { return h.udQP(0x1111) },
			prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 128) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UDSendOnly, DestQP: q.qp.num,
					DETH: wire.DETHFields{QKey: 0x2222, SrcQP: 5}}, payload16))
			}, counter: "QKeyDrops", state: verbs.QPSRTS},
		{name: "ud_without_a_receive", qp: func(h *hostile, _ wire.QPN) *hostileQP { return h.udQP(0x1111) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UDSendOnly, DestQP: q.qp.num,
					DETH: wire.DETHFields{QKey: 0x1111, SrcQP: 5}}, payload16))
			}, counter: "NoRecvDrops", state: verbs.QPSRTS},
		{name: "ud_longer_than_the_receive", qp: func(h *hostile, _ wire.QPN) *hostileQP { return h.udQP(0x1111) },
			prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 40+8) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
				return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UDSendOnly, DestQP: q.qp.num,
					DETH: wire.DETHFields{QKey: 0x1111, SrcQP: 5}}, payload16))
			}, counter: "RxPackets", state: verbs.QPSRTS, wcs: []verbs.WCStatus{verbs.WCLocLenErr}},
	}
}

// TestHostileInput gives the engine the bad packets a broken or malicious
// peer can send, one case per sub-test, each against a fresh QP, and checks
// what it does: the NAK (and its code) or the silence, the counter that
// counts it, the QP's state, the completions, the asynchronous event
// (IBV_EVENT_QP_ACCESS_ERR after a NAK remote access error,
// IBV_EVENT_QP_REQ_ERR after a NAK invalid request). At the end, no byte of
// the engine's memory outside what the valid operations wrote has changed.
// docs/faults.md tabulates the cases; provider/soft's TestHostileInput
// sends some of them over a real UDP socket.
func TestHostileInput(t *testing.T) {
	h := newHostile(t)
	for i, c := range hostileCases(h) {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			h.resps, h.events = h.resps[:0], h.events[:0]
			peerQPN := wire.QPN(0x200 + i)
			mk := c.qp
			if mk == nil {
				mk = func(h *hostile, n wire.QPN) *hostileQP {
					return h.rcQP(n, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
				}
			}
			q := mk(h, peerQPN)
			if c.prep != nil {
				c.prep(h, q)
			}
			pkts, from := c.attack(h, q)
			if !from.IsValid() {
				from = hostilePeer
			}
			before := h.counter(c.counter)
			h.send(from, pkts...)
			r, ok := h.response(peerQPN)
			switch {
			case c.resp == nil && ok:
				t.Errorf("response %+v, want none", r)
			case c.resp != nil && !ok:
				t.Fatalf("no response, want %v %v", c.resp.op, c.resp.syn)
			case c.resp != nil && (r.op != c.resp.op || r.syn != c.resp.syn || (c.resp.psn != 0 && r.psn != c.resp.psn) || r.orig != c.resp.orig):
				t.Fatalf("response %v %v PSN %#x, want %v %v (PSN %#x)", r.op, r.syn, r.psn, c.resp.op, c.resp.syn, c.resp.psn)
			}
			if h.counter(c.counter) == before {
				t.Fatalf("counter %s did not grow: %+v", c.counter, h.dev.Stats())
			}
			if c.check != nil {
				c.check(h, q)
			}
			var got []verbs.WCStatus
			if q.cq != nil {
				var w [16]verbs.WC
				for _, wc := range w[:q.cq.Poll(w[:])] {
					got = append(got, wc.Status)
				}
			}
			if !reflect.DeepEqual(got, c.wcs) && len(got)+len(c.wcs) > 0 {
				t.Errorf("completions %v, want %v", got, c.wcs)
			}
			if s := q.qp.State(); s != c.state {
				t.Errorf("QP state %v, want %v", s, c.state)
			}
			h.checkEvents(t, c, q)
		})
	}
	h.t = t
	// Nothing outside what the valid operations wrote (the first 16 KiB of
	// the MR with every right) changed.
	for i, b := range h.mem {
		if b != hostileCanary && (i < 16<<10 || i >= 32<<10) {
			t.Fatalf("byte %d of the engine's memory (outside the regions written) is %#x", i, b)
		}
	}
	for i, b := range h.all.Buf()[12<<10:] {
		if b != hostileCanary {
			t.Fatalf("byte %d of the last 4 KiB of the MR is %#x", 12<<10+i, b)
		}
	}
}

// checkEvents checks the asynchronous events of case c: the responder's
// errors raise their event, and nothing else does.
func (h *hostile) checkEvents(t *testing.T, c hostileCase, q *hostileQP) {
	t.Helper()
	var wantEv, gotEv []verbs.EventType
	switch c.resp {
	case nakAccess:
		wantEv = []verbs.EventType{verbs.EventQPAccessErr}
	case nakInvalid:
		wantEv = []verbs.EventType{verbs.EventQPReqErr}
	}
	for _, ev := range h.events {
		if ev.QP != q.qp {
			t.Errorf("event %v of another object: %+v", ev.Type, ev)
		}
		gotEv = append(gotEv, ev.Type)
	}
	if !reflect.DeepEqual(gotEv, wantEv) {
		t.Errorf("asynchronous events %v, want %v", gotEv, wantEv)
	}
}
