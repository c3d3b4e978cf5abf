package ib

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes and constants of CM MADs.
const (
	MADSize    = 256 // a whole MAD: the UD payload of a CM message
	HeaderSize = 24  // the common MAD header
	CMSize     = MADSize - HeaderSize

	BaseVersion    = 1
	MgmtClassCM    = 0x07
	ClassVersionCM = 2
	MethodSend     = 0x03

	// GSIQKey is the Q_Key of QP 1, the general services interface.
	GSIQKey = 0x80010000
	// GSIQPN is the general services QP.
	GSIQPN = 1
	// GSISourcePort is the UDP source port rdma_rxe sends QP 1's packets
	// from: 0xC000 + hash_32(1, 14).
	GSISourcePort = 55410
)

// AttrID is a CM attribute: which message a MAD carries.
type AttrID uint16

// The CM attribute IDs.
const (
	AttrREQ     AttrID = 0x0010
	AttrMRA     AttrID = 0x0011
	AttrREJ     AttrID = 0x0012
	AttrREP     AttrID = 0x0013
	AttrRTU     AttrID = 0x0014
	AttrDREQ    AttrID = 0x0015
	AttrDREP    AttrID = 0x0016
	AttrSIDRREQ AttrID = 0x0017
	AttrSIDRREP AttrID = 0x0018
	AttrLAP     AttrID = 0x0019
	AttrAPR     AttrID = 0x001A
)

var attrNames = map[AttrID]string{AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP",
	AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
	AttrLAP: "LAP", AttrAPR: "APR"}

// String returns the message name ("REQ") or the number in hex.
func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// Errors of the codecs.
var (
	ErrTruncated = errors.New("ib: message truncated")
	ErrNotCM     = errors.New("ib: not a CM MAD")
	ErrTooLong   = errors.New("ib: private data too long")
)

// MADHeader is the common MAD header (IBTA 13.4.3).
type MADHeader struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        AttrID
	AttrMod       uint32
}

// CMHeader returns the header of a CM Send MAD carrying attr.
func CMHeader(tid uint64, attr AttrID) MADHeader {
	return MADHeader{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: ClassVersionCM,
		Method: MethodSend, TID: tid, AttrID: attr}
}

// Marshal writes the header into b[:HeaderSize].
func (h *MADHeader) Marshal(b []byte) {
	_ = b[HeaderSize-1]
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TID)
	binary.BigEndian.PutUint16(b[16:], uint16(h.AttrID))
	b[18], b[19] = 0, 0
	binary.BigEndian.PutUint32(b[20:], h.AttrMod)
}

// ParseMADHeader reads the header of a MAD.
func ParseMADHeader(b []byte) (MADHeader, error) {
	if len(b) < HeaderSize {
		return MADHeader{}, ErrTruncated
	}
	return MADHeader{BaseVersion: b[0], MgmtClass: b[1], ClassVersion: b[2], Method: b[3],
		Status:        binary.BigEndian.Uint16(b[4:]),
		ClassSpecific: binary.BigEndian.Uint16(b[6:]),
		TID:           binary.BigEndian.Uint64(b[8:]),
		AttrID:        AttrID(binary.BigEndian.Uint16(b[16:])),
		AttrMod:       binary.BigEndian.Uint32(b[20:])}, nil
}

// CheckCM reads the header of a MAD and checks it is a CM Send MAD of the
// right size and versions, as Linux's ib_mad and ib_cm do before a message
// reaches the CM; it returns the header and the CM message (CMSize bytes).
func CheckCM(mad []byte) (MADHeader, []byte, error) {
	if len(mad) != MADSize {
		return MADHeader{}, nil, fmt.Errorf("%w: %d bytes, want %d", ErrNotCM, len(mad), MADSize)
	}
	h, _ := ParseMADHeader(mad)
	if h.BaseVersion != BaseVersion || h.MgmtClass != MgmtClassCM || h.ClassVersion != ClassVersionCM || h.Method != MethodSend {
		return h, nil, fmt.Errorf("%w: base %d class %#x version %d method %#x", ErrNotCM,
			h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method)
	}
	return h, mad[HeaderSize:], nil
}

// Message is a CM message body: it marshals itself into CMSize bytes and
// names its attribute.
type Message interface {
	Attr() AttrID
	Marshal(b []byte)
}

// AppendMAD appends a whole CM MAD (header and message, MADSize bytes) to
// dst.
func AppendMAD(dst []byte, tid uint64, m Message) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, MADSize)...)
	h := CMHeader(tid, m.Attr())
	h.Marshal(dst[n:])
	m.Marshal(dst[n+HeaderSize : n+MADSize])
	return dst
}

// Parse reads the CM message of a MAD that passed CheckCM: the returned
// value is a *REQ, *REP, *RTU, *REJ, *MRA, *DREQ, *DREP, *SIDRREQ or
// *SIDRREP. Other attributes give ErrNotCM.
func Parse(attr AttrID, b []byte) (Message, error) {
	if len(b) < CMSize {
		return nil, ErrTruncated
	}
	var m interface {
		Message
		unmarshal([]byte)
	}
	switch attr {
	case AttrREQ:
		m = new(REQ)
	case AttrREP:
		m = new(REP)
	case AttrRTU:
		m = new(RTU)
	case AttrREJ:
		m = new(REJ)
	case AttrMRA:
		m = new(MRA)
	case AttrDREQ:
		m = new(DREQ)
	case AttrDREP:
		m = new(DREP)
	case AttrSIDRREQ:
		m = new(SIDRREQ)
	case AttrSIDRREP:
		m = new(SIDRREP)
	default:
		return nil, fmt.Errorf("%w: attribute %v", ErrNotCM, attr)
	}
	m.unmarshal(b[:CMSize])
	return m, nil
}

func be24(b []byte) uint32     { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }
func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}
func clear0(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
