package ib

import "encoding/binary"

// Private data sizes of each message.
const (
	REQPrivateSize     = 92
	REPPrivateSize     = 196
	RTUPrivateSize     = 224
	REJPrivateSize     = 148
	MRAPrivateSize     = 222
	DREQPrivateSize    = 220
	DREPPrivateSize    = 224
	SIDRREQPrivateSize = 216
	SIDRREPPrivateSize = 136
	REJARISize         = 72
)

// Transport service types of a REQ.
const (
	TransportRC  = 0
	TransportUC  = 1
	TransportXRC = 3
)

// MsgKind says which message an MRA or REJ is about (the two-bit
// "message MRAed" / "message REJected" field).
type MsgKind uint8

// The MsgKind values.
const (
	KindREQ   MsgKind = 0
	KindREP   MsgKind = 1
	KindOther MsgKind = 2
)

// REQ is the connection request (IBTA 12.6.5).
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportType           uint8  // 2 bits
	E2EFlowControl          bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits: 1 = 256 .. 5 = 4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	PrimaryLocalLID         uint16
	PrimaryRemoteLID        uint16
	PrimaryLocalGID         [16]byte
	PrimaryRemoteGID        [16]byte
	FlowLabel               uint32 // 20 bits
	PacketRate              uint8  // 6 bits
	TrafficClass            uint8
	HopLimit                uint8
	SL                      uint8 // 4 bits
	SubnetLocal             bool
	LocalACKTimeout         uint8    // 5 bits
	Alternate               [44]byte // the alternate path, bytes 96-139 (zero on RoCE)
	PrivateData             [REQPrivateSize]byte
	// PrivateLen is goroce's extension in the reserved byte 4 (which
	// Linux sends as 0 and ignores): 1 + how many bytes of PrivateData
	// the sender's application gave (rdma_cm's header included), so
	// that the receiver gets them exactly; 0: not said.
	PrivateLen uint8
}

// Attr returns AttrREQ.
func (*REQ) Attr() AttrID { return AttrREQ }

// Marshal writes the REQ into b[:CMSize].
func (m *REQ) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	be := binary.BigEndian
	be.PutUint32(b[0:], m.LocalCommID)
	b[4] = m.PrivateLen
	be.PutUint64(b[8:], m.ServiceID)
	be.PutUint64(b[16:], m.LocalCAGUID)
	be.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | (m.TransportType&3)<<1 | b2u(m.E2EFlowControl)
	put24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	be.PutUint16(b[48:], m.PKey)
	b[50] = m.PathMTU<<4 | b2u(m.RDCExists)<<3 | m.RNRRetryCount&7
	b[51] = m.MaxCMRetries<<4 | b2u(m.SRQ)<<3 | m.ExtTransportType&7
	be.PutUint16(b[52:], m.PrimaryLocalLID)
	be.PutUint16(b[54:], m.PrimaryRemoteLID)
	copy(b[56:72], m.PrimaryLocalGID[:])
	copy(b[72:88], m.PrimaryRemoteGID[:])
	be.PutUint32(b[88:], (m.FlowLabel&0xFFFFF)<<12|uint32(m.PacketRate&0x3F))
	b[92] = m.TrafficClass
	b[93] = m.HopLimit
	b[94] = m.SL<<4 | b2u(m.SubnetLocal)<<3
	b[95] = m.LocalACKTimeout << 3
	copy(b[96:140], m.Alternate[:])
	copy(b[140:], m.PrivateData[:])
}

func (m *REQ) unmarshal(b []byte) {
	be := binary.BigEndian
	*m = REQ{
		LocalCommID:             be.Uint32(b[0:]),
		ServiceID:               be.Uint64(b[8:]),
		LocalCAGUID:             be.Uint64(b[16:]),
		LocalQKey:               be.Uint32(b[28:]),
		LocalQPN:                be24(b[32:]),
		ResponderResources:      b[35],
		LocalEECN:               be24(b[36:]),
		InitiatorDepth:          b[39],
		RemoteEECN:              be24(b[40:]),
		RemoteCMResponseTimeout: b[43] >> 3,
		TransportType:           b[43] >> 1 & 3,
		E2EFlowControl:          b[43]&1 != 0,
		StartingPSN:             be24(b[44:]),
		LocalCMResponseTimeout:  b[47] >> 3,
		RetryCount:              b[47] & 7,
		PKey:                    be.Uint16(b[48:]),
		PathMTU:                 b[50] >> 4,
		RDCExists:               b[50]&8 != 0,
		RNRRetryCount:           b[50] & 7,
		MaxCMRetries:            b[51] >> 4,
		SRQ:                     b[51]&8 != 0,
		ExtTransportType:        b[51] & 7,
		PrimaryLocalLID:         be.Uint16(b[52:]),
		PrimaryRemoteLID:        be.Uint16(b[54:]),
		FlowLabel:               be.Uint32(b[88:]) >> 12,
		PacketRate:              b[91] & 0x3F,
		TrafficClass:            b[92],
		HopLimit:                b[93],
		SL:                      b[94] >> 4,
		SubnetLocal:             b[94]&8 != 0,
		LocalACKTimeout:         b[95] >> 3,
		PrivateLen:              b[4],
	}
	copy(m.PrimaryLocalGID[:], b[56:72])
	copy(m.PrimaryRemoteGID[:], b[72:88])
	copy(m.Alternate[:], b[96:140])
	copy(m.PrivateData[:], b[140:CMSize])
}

// REP is the reply to a REQ (IBTA 12.6.8).
type REP struct {
	LocalCommID        uint32
	RemoteCommID       uint32
	LocalQKey          uint32
	LocalQPN           uint32 // 24 bits
	LocalEECN          uint32 // 24 bits
	StartingPSN        uint32 // 24 bits
	ResponderResources uint8
	InitiatorDepth     uint8
	TargetACKDelay     uint8 // 5 bits
	FailoverAccepted   uint8 // 2 bits
	E2EFlowControl     bool
	RNRRetryCount      uint8 // 3 bits
	SRQ                bool
	LocalCAGUID        uint64
	PrivateData        [REPPrivateSize]byte
	// PrivateLen is goroce's extension in the reserved byte 15: 1 + how
	// many bytes of PrivateData the sender's application gave; 0: not
	// said (see REQ.PrivateLen). Linux's ib_cm does not ignore this byte
	// (a REP with it set gets a REJ 28 from rdma_rxe's rdma_cm): send it
	// only to a peer whose REQ set REQ.PrivateLen.
	PrivateLen uint8
}

// Attr returns AttrREP.
func (*REP) Attr() AttrID { return AttrREP }

// Marshal writes the REP into b[:CMSize].
func (m *REP) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	be := binary.BigEndian
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	be.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	b[15] = m.PrivateLen
	put24(b[16:], m.LocalEECN)
	put24(b[20:], m.StartingPSN)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | (m.FailoverAccepted&3)<<1 | b2u(m.E2EFlowControl)
	b[27] = (m.RNRRetryCount&7)<<5 | b2u(m.SRQ)<<4
	be.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.PrivateData[:])
}

func (m *REP) unmarshal(b []byte) {
	be := binary.BigEndian
	*m = REP{
		LocalCommID:        be.Uint32(b[0:]),
		RemoteCommID:       be.Uint32(b[4:]),
		LocalQKey:          be.Uint32(b[8:]),
		LocalQPN:           be24(b[12:]),
		LocalEECN:          be24(b[16:]),
		StartingPSN:        be24(b[20:]),
		ResponderResources: b[24],
		InitiatorDepth:     b[25],
		TargetACKDelay:     b[26] >> 3,
		FailoverAccepted:   b[26] >> 1 & 3,
		E2EFlowControl:     b[26]&1 != 0,
		RNRRetryCount:      b[27] >> 5,
		SRQ:                b[27]&0x10 != 0,
		LocalCAGUID:        be.Uint64(b[28:]),
		PrivateLen:         b[15],
	}
	copy(m.PrivateData[:], b[36:CMSize])
}

// RTU is "ready to use", the active side's answer to a REP.
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateSize]byte
}

// Attr returns AttrRTU.
func (*RTU) Attr() AttrID { return AttrRTU }

// Marshal writes the RTU into b[:CMSize].
func (m *RTU) Marshal(b []byte) { marshalIDs(b, m.LocalCommID, m.RemoteCommID, m.PrivateData[:]) }

func (m *RTU) unmarshal(b []byte) {
	m.LocalCommID, m.RemoteCommID = ids(b)
	copy(m.PrivateData[:], b[8:CMSize])
}

// DREQ asks to disconnect.
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN
	PrivateData  [DREQPrivateSize]byte
}

// Attr returns AttrDREQ.
func (*DREQ) Attr() AttrID { return AttrDREQ }

// Marshal writes the DREQ into b[:CMSize].
func (m *DREQ) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	put24(b[8:], m.RemoteQPN)
	copy(b[12:], m.PrivateData[:])
}

func (m *DREQ) unmarshal(b []byte) {
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.RemoteQPN = be24(b[8:])
	copy(m.PrivateData[:], b[12:CMSize])
}

// DREP answers a DREQ.
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateSize]byte
}

// Attr returns AttrDREP.
func (*DREP) Attr() AttrID { return AttrDREP }

// Marshal writes the DREP into b[:CMSize].
func (m *DREP) Marshal(b []byte) { marshalIDs(b, m.LocalCommID, m.RemoteCommID, m.PrivateData[:]) }

func (m *DREP) unmarshal(b []byte) {
	m.LocalCommID, m.RemoteCommID = ids(b)
	copy(m.PrivateData[:], b[8:CMSize])
}

// Reject reasons (IBTA table 112) that goroce sends or tells apart.
const (
	RejNoQP                 = 1
	RejNoResources          = 3
	RejTimeout              = 4
	RejUnsupported          = 5
	RejInvalidCommID        = 6
	RejInvalidServiceID     = 8
	RejInvalidTransportType = 9
	RejStaleConn            = 10
	RejInvalidGID           = 12
	RejInvalidMTU           = 26
	RejInsufficientRespRes  = 27
	RejConsumer             = 28
	RejInvalidRNRRetry      = 29
	RejDuplicateLocalCommID = 30
	RejInvalidClassVersion  = 31
)

// REJ rejects a REQ or a REP.
type REJ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	MsgRejected  MsgKind // 2 bits
	ARILength    uint8   // 7 bits
	Reason       uint16
	ARI          [REJARISize]byte
	PrivateData  [REJPrivateSize]byte
}

// Attr returns AttrREJ.
func (*REJ) Attr() AttrID { return AttrREJ }

// Marshal writes the REJ into b[:CMSize].
func (m *REJ) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = byte(m.MsgRejected&3) << 6
	b[9] = m.ARILength << 1
	binary.BigEndian.PutUint16(b[10:], m.Reason)
	copy(b[12:84], m.ARI[:])
	copy(b[84:], m.PrivateData[:])
}

func (m *REJ) unmarshal(b []byte) {
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.MsgRejected = MsgKind(b[8] >> 6)
	m.ARILength = b[9] >> 1
	m.Reason = binary.BigEndian.Uint16(b[10:])
	copy(m.ARI[:], b[12:84])
	copy(m.PrivateData[:], b[84:CMSize])
}

// MRA is "message receipt acknowledgement": the sender needs more time.
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MsgMRAed       MsgKind // 2 bits
	ServiceTimeout uint8   // 5 bits
	PrivateData    [MRAPrivateSize]byte
}

// Attr returns AttrMRA.
func (*MRA) Attr() AttrID { return AttrMRA }

// Marshal writes the MRA into b[:CMSize].
func (m *MRA) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = byte(m.MsgMRAed&3) << 6
	b[9] = m.ServiceTimeout << 3
	copy(b[10:], m.PrivateData[:])
}

func (m *MRA) unmarshal(b []byte) {
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.MsgMRAed = MsgKind(b[8] >> 6)
	m.ServiceTimeout = b[9] >> 3
	copy(m.PrivateData[:], b[10:CMSize])
}

// SIDRREQ is a service ID resolution request (UD).
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateSize]byte
}

// Attr returns AttrSIDRREQ.
func (*SIDRREQ) Attr() AttrID { return AttrSIDRREQ }

// Marshal writes the SIDR_REQ into b[:CMSize].
func (m *SIDRREQ) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	copy(b[16:], m.PrivateData[:])
}

func (m *SIDRREQ) unmarshal(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.PKey = binary.BigEndian.Uint16(b[4:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	copy(m.PrivateData[:], b[16:CMSize])
}

// SIDRREP answers a SIDR_REQ.
type SIDRREP struct {
	RequestID     uint32
	Status        uint8
	AddInfoLength uint8
	QPN           uint32 // 24 bits
	ServiceID     uint64
	QKey          uint32
	AddInfo       [72]byte
	PrivateData   [SIDRREPPrivateSize]byte
}

// Attr returns AttrSIDRREP.
func (*SIDRREP) Attr() AttrID { return AttrSIDRREP }

// Marshal writes the SIDR_REP into b[:CMSize].
func (m *SIDRREP) Marshal(b []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	b[4] = m.Status
	b[5] = m.AddInfoLength
	put24(b[8:], m.QPN)
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	binary.BigEndian.PutUint32(b[20:], m.QKey)
	copy(b[24:96], m.AddInfo[:])
	copy(b[96:], m.PrivateData[:])
}

func (m *SIDRREP) unmarshal(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.Status, m.AddInfoLength = b[4], b[5]
	m.QPN = be24(b[8:])
	m.ServiceID = binary.BigEndian.Uint64(b[12:])
	m.QKey = binary.BigEndian.Uint32(b[20:])
	copy(m.AddInfo[:], b[24:96])
	copy(m.PrivateData[:], b[96:CMSize])
}

func ids(b []byte) (uint32, uint32) {
	return binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
}

func marshalIDs(b []byte, l, r uint32, priv []byte) {
	b = b[:CMSize]
	clear0(b)
	binary.BigEndian.PutUint32(b[0:], l)
	binary.BigEndian.PutUint32(b[4:], r)
	copy(b[8:], priv)
}

// Private returns the private data of a REQ or REP as its sender's
// application gave it: pd cut to PrivateLen-1 bytes when the sender said
// (PrivateLen), else all of pd.
func Private(pd []byte, privateLen uint8) []byte {
	if privateLen == 0 || int(privateLen)-1 > len(pd) {
		return pd
	}
	return pd[:privateLen-1]
}
