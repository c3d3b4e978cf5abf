//go:build linux

package soft

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Addresses of TestHostileInput: the device under test, the peer its QPs are
// connected to (a plain UDP socket forging the peer's packets) and an
// intruder elsewhere.
var (
	hostileDev      = netip.MustParseAddr("127.0.9.5")
	hostilePeer     = netip.MustParseAddr("127.0.9.6")
	hostileIntruder = netip.MustParseAddr("127.0.9.7")
)

// hostile is TestHostileInput's world: device B on a UDP socket, the peer
// and intruder sockets that forge packets to it, and B's memory: one
// buffer filled with a canary, parts of it registered.
type hostile struct {
	t              *testing.T
	dev            *Device
	ctx            verbs.Context
	pd, otherPD    verbs.PD
	peer, intruder *net.UDPConn
	mem            []byte
	all            verbs.MR // [16K, 32K): every access right
	ro             verbs.MR // [40K, 44K): REMOTE_READ only
	wo             verbs.MR // [48K, 52K): REMOTE_WRITE only
	other          verbs.MR // [56K, 60K): every right, another PD
}

const (
	hostileCanary            = 0xA5
	hostileCanaryWord uint64 = 0xA5A5A5A5A5A5A5A5
)

func newHostile(t *testing.T) *hostile {
	h := &hostile{t: t, mem: make([]byte, 64<<10)}
	for i := range h.mem {
		h.mem[i] = hostileCanary
	}
	c, err := udp.Listen(hostileDev, udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", hostileDev, err)
	}
	h.dev, err = New(Options{Name: "hostile", Conn: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.dev.Close() })
	for _, x := range []struct {
		conn **net.UDPConn
		addr netip.Addr
	}{{&h.peer, hostilePeer}, {&h.intruder, hostileIntruder}} {
		*x.conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.addr, wire.RoCEv2Port)))
		if err != nil {
			t.Skipf("UDP socket on %v: %v", x.addr, err)
		}
		t.Cleanup(func() { (*x.conn).Close() })
	}
	h.ctx, err = h.dev.Open()
	must(t, err)
	h.pd, err = h.ctx.AllocPD()
	must(t, err)
	h.otherPD, err = h.ctx.AllocPD()
	must(t, err)
	lw := verbs.AccessLocalWrite
	reg := func(pd verbs.PD, off, n int, access verbs.AccessFlags) verbs.MR {
		mr, err := pd.RegMR(h.mem[off:off+n:off+n], access)
		must(t, err)
		return mr
	}
	h.all = reg(h.pd, 16<<10, 16<<10, e2eAccess)
	h.ro = reg(h.pd, 40<<10, 4<<10, lw|verbs.AccessRemoteRead)
	h.wo = reg(h.pd, 48<<10, 4<<10, lw|verbs.AccessRemoteWrite)
	h.other = reg(h.otherPD, 56<<10, 4<<10, e2eAccess)
	return h
}

// hostileQP is a QP of B connected to the peer socket, which plays the
// remote QP peerQPN.
type hostileQP struct {
	qp      verbs.QP
	cq      verbs.CQ
	peerQPN wire.QPN
	epsn    wire.PSN // the PSN B expects next
}

func (h *hostile) rcQP(peerQPN wire.QPN, access verbs.AccessFlags) *hostileQP {
	t := h.t
	t.Helper()
	cq, err := h.ctx.CreateCQ(16, nil)
	must(t, err)
	qp, err := h.pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: uint32(peerQPN), RQPSN: 0x10,
		MaxDestRdAtomic: 4, MinRNRTimer: 5, AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(hostilePeer), PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x50, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	return &hostileQP{qp: qp, cq: cq, peerQPN: peerQPN, epsn: 0x10}
}

func (h *hostile) udQP(qkey uint32) *hostileQP {
	t := h.t
	t.Helper()
	cq, err := h.ctx.CreateCQ(16, nil)
	must(t, err)
	qp, err := h.pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTUD,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(t, err)
	e2eUDToRTS(t, qp, qkey, 0)
	return &hostileQP{qp: qp, cq: cq}
}

// forge builds a transport packet from address from to B, ICRC included.
func (h *hostile) forge(from netip.Addr, hdr wire.Header, payload []byte) []byte {
	h.t.Helper()
	if hdr.PKey == 0 {
		hdr.PKey = wire.DefaultPKey
	}
	fl := wire.Flow{Src: from, Dst: hostileDev, SrcPort: wire.RoCEv2Port}
	b, err := wire.AppendDatagram(nil, &fl, &hdr, payload)
	if err != nil {
		h.t.Fatalf("building %v: %v", hdr.Opcode, err)
	}
	return b
}

// send sends datagrams to B from conn.
func (h *hostile) send(conn *net.UDPConn, pkts ...[]byte) {
	h.t.Helper()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(hostileDev, wire.RoCEv2Port))
	for _, p := range pkts {
		if _, err := conn.WriteToUDP(p, to); err != nil {
			h.t.Fatal(err)
		}
	}
}

// hostileResp is what B answered.
type hostileResp struct {
	op   wire.Opcode
	psn  wire.PSN
	syn  wire.Syndrome
	orig uint64 // ATOMIC ACKNOWLEDGE
}

// response returns B's next response to the peer QP peerQPN, waiting up to
// wait; ok is false when none came.
func (h *hostile) response(peerQPN wire.QPN, wait time.Duration) (r hostileResp, ok bool) {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	buf := make([]byte, 9000)
	for {
		h.peer.SetReadDeadline(deadline)
		n, _, err := h.peer.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return r, false
			}
			h.t.Fatal(err)
		}
		var p wire.Packet
		if wire.Parse(buf[:n], &p) != nil || p.BTH().DestQP() != peerQPN {
			continue // malformed, or for another case's QP
		}
		r = hostileResp{op: p.Opcode(), psn: p.BTH().PSN()}
		if a := p.AETH(); a != nil {
			r.syn = a.Syndrome()
		}
		if a := p.AtomicAckETH(); a != nil {
			r.orig = a.Orig()
		}
		return r, true
	}
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
	// attack returns the datagrams to send and the socket to send them from
	// (nil: the peer).
	attack func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn)
	// Outcome: the response B sends the peer (nil: none), the counter that
	// must grow by one, the QP's state after, the completions on its CQ.
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
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCWriteOnly, DestQP: wire.QPN(q.qp.Num()), PSN: q.epsn, AckReq: true,
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen}}, payload)
}

func (h *hostile) read(q *hostileQP, rkey uint32, va uint64, n uint32) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCReadRequest, DestQP: wire.QPN(q.qp.Num()), PSN: q.epsn, AckReq: true,
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: n}}, nil)
}

func (h *hostile) fetchAdd(q *hostileQP, rkey uint32, va uint64, add uint64) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCFetchAdd, DestQP: wire.QPN(q.qp.Num()), PSN: q.epsn, AckReq: true,
		AtomicETH: wire.AtomicFields{VA: va, RKey: rkey, SwapAdd: add}}, nil)
}

func (h *hostile) sendOp(q *hostileQP, op wire.Opcode, payload []byte) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: op, DestQP: wire.QPN(q.qp.Num()), PSN: q.epsn, AckReq: true}, payload)
}

func (h *hostile) postRecv(q *hostileQP, off, n int) {
	h.t.Helper()
	_, err := q.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: []verbs.SGE{{Addr: h.all.Addr() + uint64(off), Length: uint32(n), LKey: h.all.LKey()}}}})
	must(h.t, err)
}

func one(conn *net.UDPConn, pkts ...[]byte) ([][]byte, *net.UDPConn) { return pkts, conn }

// TestHostileInput sends device B, over a real UDP socket on loopback, some
// of the bad packets a broken or malicious peer can send (a smoke: one or
// two of each kind; the engine's TestHostileInput gives it every case of
// docs/faults.md, without sockets), one case per sub-test, each against a
// fresh QP, and checks what B does: the NAK (and its code) or
// the silence, the counter that counts it, the QP's state, the completions,
// the asynchronous event (IBV_EVENT_QP_ACCESS_ERR after a NAK remote access
// error, IBV_EVENT_QP_REQ_ERR after a NAK invalid request). At the end, no
// byte of B's memory outside what the valid operations wrote has changed.
func TestHostileInput(t *testing.T) {
	h := newHostile(t)
	all, wo := h.all, h.wo
	payload16 := []byte("sixteen bytes!!!")
	rcWith := func(access verbs.AccessFlags) func(*hostile, wire.QPN) *hostileQP {
		return func(h *hostile, n wire.QPN) *hostileQP { return h.rcQP(n, access) }
	}
	cases := []hostileCase{
		// Memory protection: the responder's R_Key, PD, access and bounds checks.
		{name: "write_unknown_rkey", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.write(q, 0xDEAD00, all.Addr(), 16, payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "read_from_write_only_mr", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.read(q, wo.RKey(), wo.Addr(), 16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_misaligned", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.fetchAdd(q, all.RKey(), all.Addr()+4, 1))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},

		// Malformed requests: invalid request NAKs.
		{name: "send_longer_than_the_receive", prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 8) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
				return one(nil, h.sendOp(q, wire.RCSendOnly, payload16))
			}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr, wcs: []verbs.WCStatus{verbs.WCLocLenErr}},

		// Flow control and sequence: recoverable, the QP stays in RTS.
		{name: "send_without_a_receive", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.sendOp(q, wire.RCSendOnly, payload16))
		}, resp: syn(wire.RCAcknowledge, wire.RNRNAK(5)), counter: "RNRSent", state: verbs.QPSRTS},
		{name: "psn_ahead", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			q.epsn += 5
			p1 := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			q.epsn++
			p2 := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			q.epsn -= 6
			return one(nil, p1, p2) // one NAK for the gap, not two
		}, resp: &hostileResp{op: wire.RCAcknowledge, syn: wire.NAKPSNSequence, psn: 0x10}, counter: "OutOfSequence", state: verbs.QPSRTS,
			check: func(h *hostile, q *hostileQP) {
				if r, ok := h.response(q.peerQPN, 50*time.Millisecond); ok {
					h.t.Errorf("a second response %+v for the same gap", r)
				}
			}},
		{name: "duplicate_atomic", prep: func(h *hostile, q *hostileQP) {
			h.send(h.peer, h.fetchAdd(q, all.RKey(), all.Addr()+8192, 5))
			if r, ok := h.response(q.peerQPN, 5*time.Second); !ok || r.op != wire.RCAtomicAcknowledge || r.orig != hostileCanaryWord {
				h.t.Fatalf("first FETCH_ADD: response %+v %v", r, ok)
			}
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.fetchAdd(q, all.RKey(), all.Addr()+8192, 5))
		}, resp: &hostileResp{op: wire.RCAtomicAcknowledge, syn: wire.ACKUnlimited, psn: 0x10, orig: hostileCanaryWord}, counter: "Duplicates", state: verbs.QPSRTS,
			check: func(h *hostile, q *hostileQP) {
				h.dev.Stats()
				if v := binary.NativeEndian.Uint64(all.Buf()[8192:]); v != hostileCanaryWord+5 {
					h.t.Errorf("atomic word %#x after the duplicate FETCH_ADD, want %#x (executed once)", v, hostileCanaryWord+5)
				}
			}},

		// Dropped before any QP sees them.
		{name: "bad_icrc", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			p := h.write(q, all.RKey(), all.Addr(), 16, payload16)
			p[len(p)-8] ^= 0x10 // a payload bit
			return one(nil, p)
		}, counter: "ICRCDrops", state: verbs.QPSRTS},
		{name: "qp_in_reset", qp: func(h *hostile, n wire.QPN) *hostileQP {
			qp, err := h.pd.CreateQP(&verbs.QPInitAttr{SendCQ: h.mustCQ(), RecvCQ: h.mustCQ(), QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			must(h.t, err)
			return &hostileQP{qp: qp, peerQPN: n, epsn: 0x10}
		}, attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(nil, h.sendOp(q, wire.RCSendOnly, payload16))
		}, counter: "UnknownQPDrops", state: verbs.QPSReset},
		{name: "rc_packet_from_another_address", attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
			return one(h.intruder, h.forge(hostileIntruder, wire.Header{Opcode: wire.RCWriteOnly, DestQP: wire.QPN(q.qp.Num()), PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr(), RKey: all.RKey(), DMALen: 16}}, payload16))
		}, counter: "WrongPeerDrops", state: verbs.QPSRTS},

		// UD.
		{name: "ud_wrong_qkey", qp: func(h *hostile, _ wire.QPN) *hostileQP { return h.udQP(0x1111) },
			prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 128) },
			attack: func(h *hostile, q *hostileQP) ([][]byte, *net.UDPConn) {
				return one(nil, h.forge(hostilePeer, wire.Header{Opcode: wire.UDSendOnly, DestQP: wire.QPN(q.qp.Num()),
					DETH: wire.DETHFields{QKey: 0x2222, SrcQP: 5}}, payload16))
			}, counter: "QKeyDrops", state: verbs.QPSRTS},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			peerQPN := wire.QPN(0x200 + i)
			mk := c.qp
			if mk == nil {
				mk = rcWith(verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic)
			}
			q := mk(h, peerQPN)
			if c.prep != nil {
				c.prep(h, q)
			}
			pkts, conn := c.attack(h, q)
			if conn == nil {
				conn = h.peer
			}
			before := h.counter(c.counter)
			h.send(conn, pkts...)
			if c.resp != nil {
				r, ok := h.response(peerQPN, 5*time.Second)
				if !ok {
					t.Fatalf("no response, want %v %v", c.resp.op, c.resp.syn)
				}
				if r.op != c.resp.op || r.syn != c.resp.syn || (c.resp.psn != 0 && r.psn != c.resp.psn) || r.orig != c.resp.orig {
					t.Fatalf("response %v %v PSN %#x, want %v %v (PSN %#x)", r.op, r.syn, r.psn, c.resp.op, c.resp.syn, c.resp.psn)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for h.counter(c.counter) == before {
				if time.Now().After(deadline) {
					t.Fatalf("counter %s did not grow: %+v", c.counter, h.dev.Stats())
				}
				time.Sleep(time.Millisecond)
			}
			if c.resp == nil {
				if r, ok := h.response(peerQPN, 30*time.Millisecond); ok {
					t.Errorf("response %+v, want none", r)
				}
			}
			if c.check != nil {
				c.check(h, q)
			}
			var got []verbs.WCStatus
			if q.cq != nil {
				if len(c.wcs) > 0 {
					for _, w := range wait(t, q.cq, len(c.wcs)) {
						got = append(got, w.Status)
					}
				}
				e2eNoMore(t, "CQ", q.cq)
			}
			if !reflect.DeepEqual(got, c.wcs) && len(got)+len(c.wcs) > 0 {
				t.Errorf("completions %v, want %v", got, c.wcs)
			}
			attr, err := q.qp.Query()
			must(t, err)
			if attr.State != c.state {
				t.Errorf("QP state %v, want %v", attr.State, c.state)
			}
			// The responder's errors raise their asynchronous event, and
			// nothing else does.
			var wantEv []verbs.EventType
			switch c.resp {
			case nakAccess:
				wantEv = []verbs.EventType{verbs.EventQPAccessErr}
			case nakInvalid:
				wantEv = []verbs.EventType{verbs.EventQPReqErr}
			}
			var gotEv []verbs.EventType
			done, cancel := context.WithCancel(context.Background())
			cancel() // the events are queued before the NAK goes out: take those there are
			for {
				ev, err := h.ctx.GetAsyncEvent(done)
				if err != nil {
					break
				}
				if ev.QP != q.qp {
					t.Errorf("event %v of another object: %+v", ev.Type, ev)
				}
				gotEv = append(gotEv, ev.Type)
			}
			if !reflect.DeepEqual(gotEv, wantEv) {
				t.Errorf("asynchronous events %v, want %v", gotEv, wantEv)
			}
			t.Logf("%s +1; QP %v; completions %v; events %v", c.counter, attr.State, got, gotEv)
		})
	}
	h.t = t
	// Nothing outside what the valid operations wrote (the first 16 KiB of
	// the MR with every right) changed.
	h.dev.Stats()
	for i, b := range h.mem {
		if b != hostileCanary && (i < 16<<10 || i >= 32<<10) {
			t.Fatalf("byte %d of B's memory (outside the regions written) is %#x", i, b)
		}
	}
	for i, b := range all.Buf()[12<<10:] {
		if b != hostileCanary {
			t.Fatalf("byte %d of the last 4 KiB of the MR is %#x", 12<<10+i, b)
		}
	}
}

func (h *hostile) mustCQ() verbs.CQ {
	cq, err := h.ctx.CreateCQ(4, nil)
	must(h.t, err)
	return cq
}
