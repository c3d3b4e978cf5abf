package ib

import "encoding/binary"

// RejectNoListener writes into out the answer Linux's ib_cm gives a REQ
// for a service nobody listens on: a REJ with reason 8
// (RejInvalidServiceID), the same transaction ID, the REQ's comm ID as its
// remote comm ID. It reports false, writing nothing, when mad is not a
// well-formed CM REQ. A device with no connection manager answers with it,
// so that a dialer learns at once that nothing listens. It does not
// allocate for a REQ.
func RejectNoListener(out *[MADSize]byte, mad []byte) bool {
	if len(mad) != MADSize || mad[0] != BaseVersion || mad[1] != MgmtClassCM || mad[2] != ClassVersionCM ||
		mad[3] != MethodSend || AttrID(binary.BigEndian.Uint16(mad[16:])) != AttrREQ {
		return false
	}
	tid := binary.BigEndian.Uint64(mad[8:])
	theirs := binary.BigEndian.Uint32(mad[HeaderSize:])
	rej := REJ{RemoteCommID: theirs, MsgRejected: KindREQ, Reason: RejInvalidServiceID}
	h := CMHeader(tid, AttrREJ)
	h.Marshal(out[:])
	rej.Marshal(out[HeaderSize:])
	return true
}
