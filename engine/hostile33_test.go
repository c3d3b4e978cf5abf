package engine

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

var readAck = syn(wire.RCReadResponseOnly, wire.ACKUnlimited)

// atomicWrite returns an ATOMIC WRITE at the QP's expected PSN.
func (h *hostile) atomicWrite(q *hostileQP, rkey uint32, va uint64, dmaLen uint32) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCAtomicWrite, DestQP: q.qp.num, PSN: q.epsn, AckReq: true,
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen}}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
}

// flush returns a FLUSH at the QP's expected PSN.
func (h *hostile) flush(q *hostileQP, typ, level uint8, rkey uint32, va uint64, n uint32) []byte {
	return h.forge(hostilePeer, wire.Header{Opcode: wire.RCFlush, DestQP: q.qp.num, PSN: q.epsn, AckReq: true,
		FlushType: typ, FlushLevel: level, RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: n}}, nil)
}

// boundMW binds a type 2 window to [off, off+n) of a region of the
// memory outside every other (the region at [32K, 40K), MW_BIND), through
// q's QP, and returns its key.
func (h *hostile) boundMW(q *hostileQP, off, n int) uint32 {
	h.t.Helper()
	mr, err := h.dev.MRs.Register(h.mem[32<<10:40<<10:40<<10], hostileAccess|verbs.AccessMWBind, h.pd)
	must(h.t, err)
	mw, err := h.dev.MRs.AllocMW(h.pd, verbs.MWType2)
	must(h.t, err)
	key := verbs.IncRKey(mw.RKey())
	must(h.t, h.dev.MRs.bindMW(q.qp, &verbs.BindMWWR{MW: mw, RKey: key, MR: mr, Addr: mr.Addr() + uint64(off), Length: uint64(n), Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}))
	return key
}

// verbs33Cases: the opcodes and keys of fast registration, memory windows,
// ATOMIC WRITE and FLUSH, and UC: never a write outside a registered
// range, a NAK (RC) or a drop (UC).
func (h *hostile) verbs33Cases() []hostileCase {
	all, ro := h.all, h.ro
	flushQP := rcWith(verbs.AccessRemoteWrite | verbs.AccessFlushGlobal)
	return []hostileCase{
		{name: "atomic_write_valid", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey(), all.Addr()+256, 8))
		}, resp: readAck, counter: "RxPackets", state: verbs.QPSRTS, check: func(h *hostile, q *hostileQP) {
			if binary.NativeEndian.Uint64(all.Buf()[256:]) != binary.NativeEndian.Uint64([]byte{1, 2, 3, 4, 5, 6, 7, 8}) {
				h.t.Error("ATOMIC WRITE did not store its bytes")
			}
		}},
		{name: "atomic_write_bad_rkey", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey()^0x40, all.Addr(), 8))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_write_beyond_mr", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey(), all.Addr()+16<<10-4, 8))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_write_read_only_mr", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, ro.RKey(), ro.Addr(), 8))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_write_misaligned", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey(), all.Addr()+12<<10+4, 8))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_write_length_16", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey(), all.Addr()+12<<10, 16))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "atomic_write_qp_without_write", qp: rcWith(verbs.AccessRemoteRead), attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.atomicWrite(q, all.RKey(), all.Addr(), 8))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "flush_mr_without_flush_access", qp: flushQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.flush(q, wire.FlushGlobal, wire.FlushRange, all.RKey(), all.Addr(), 64))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "flush_qp_without_flush_access", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.flush(q, wire.FlushGlobal, wire.FlushRange, all.RKey(), all.Addr(), 64))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "flush_beyond_mr", qp: flushQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			mr, err := h.dev.MRs.Register(h.mem[60<<10:61<<10:61<<10], verbs.AccessLocalWrite|verbs.AccessFlushGlobal, h.pd)
			must(h.t, err)
			return peer(h.flush(q, wire.FlushGlobal, wire.FlushRange, mr.RKey(), mr.Addr()+512, 1024))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "flush_valid", qp: flushQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			mr, err := h.dev.MRs.Register(h.mem[61<<10:62<<10:62<<10], verbs.AccessLocalWrite|verbs.AccessFlushGlobal, h.pd)
			must(h.t, err)
			return peer(h.flush(q, wire.FlushGlobal, wire.FlushMR, mr.RKey(), 0, 0))
		}, resp: readAck, counter: "RxPackets", state: verbs.QPSRTS},
		{name: "send_inv_user_mr", prep: func(h *hostile, q *hostileQP) { h.postRecv(q, 0, 64) }, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.RCSendOnlyInvalidate, DestQP: q.qp.num, PSN: q.epsn, AckReq: true, IETH: all.RKey()}, h.payload16))
		}, resp: nakInvalid, counter: "NAKsSent", state: verbs.QPSErr, wcs: []verbs.WCStatus{verbs.WCRemInvReqErr}, check: func(h *hostile, q *hostileQP) {
			if all.State() != MRValid {
				h.t.Error("a SEND_WITH_INV invalidated a region ibv_reg_mr registered")
			}
		}},
		{name: "mw_write_beyond_window", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			key := h.boundMW(q, 1024, 256)
			return peer(h.write(q, key, h.mem32()+1024+250, 16, h.payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "mw_invalidated_key", attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			key := h.boundMW(q, 1024, 256)
			must(h.t, h.dev.MRs.invalidate(key, h.pd))
			return peer(h.write(q, key, h.mem32()+1024, 16, h.payload16))
		}, resp: nakAccess, counter: "NAKsSent", state: verbs.QPSErr},
		{name: "uc_write_bad_rkey", qp: h.ucQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UCWriteOnly, DestQP: q.qp.num, PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr(), RKey: all.RKey() ^ 0x40, DMALen: 16}}, h.payload16))
		}, counter: "RxPackets", state: verbs.QPSRTS},
		{name: "uc_write_beyond_mr", qp: h.ucQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UCWriteOnly, DestQP: q.qp.num, PSN: q.epsn,
				RETH: wire.RETHFields{VA: all.Addr() + 16<<10 - 8, RKey: all.RKey(), DMALen: 16}}, h.payload16))
		}, counter: "RxPackets", state: verbs.QPSRTS},
		{name: "uc_middle_without_first", qp: h.ucQP, attack: func(h *hostile, q *hostileQP) ([][]byte, netip.Addr) {
			return peer(h.forge(hostilePeer, wire.Header{Opcode: wire.UCWriteLast, DestQP: q.qp.num, PSN: q.epsn}, h.payload16))
		}, counter: "RxPackets", state: verbs.QPSRTS},
	}
}

// mem32 is the address of the hostile memory at 32 KiB (boundMW's region).
func (h *hostile) mem32() uint64 { return h.all.Addr() + 16<<10 }

// ucQP makes a UC QP of the device connected to the peer.
func (h *hostile) ucQP(h2 *hostile, peerQPN wire.QPN) *hostileQP {
	t := h.t
	qp, cq := h.newQP(verbs.QPTUC)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: uint32(peerQPN), RQPSN: 0x10,
		AHAttr: verbs.AHAttr{DGID: verbs.GIDFromAddr(hostilePeer), PortNum: 1}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x50}, verbs.AttrState|verbs.AttrSQPSN))
	return &hostileQP{qp: qp, cq: cq, peerQPN: peerQPN, epsn: 0x10}
}
