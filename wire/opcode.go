package wire

import "strconv"

// Opcode is the BTH opcode. Its top three bits name the transport (RC 000,
// UC 001, RD 010, UD 011, CNP 100) and its low five bits the operation
// (IBA 9.2, table 35).
type Opcode uint8

// Opcode values (IBA table 35; Linux rdma_rxe rxe_opcode.c; RoCEv2 CNP from
// Annex A17).
const (
	RCSendFirst          = Opcode(0x00)
	RCSendMiddle         = Opcode(0x01)
	RCSendLast           = Opcode(0x02)
	RCSendLastImm        = Opcode(0x03)
	RCSendOnly           = Opcode(0x04)
	RCSendOnlyImm        = Opcode(0x05)
	RCWriteFirst         = Opcode(0x06)
	RCWriteMiddle        = Opcode(0x07)
	RCWriteLast          = Opcode(0x08)
	RCWriteLastImm       = Opcode(0x09)
	RCWriteOnly          = Opcode(0x0A)
	RCWriteOnlyImm       = Opcode(0x0B)
	RCReadRequest        = Opcode(0x0C)
	RCReadResponseFirst  = Opcode(0x0D)
	RCReadResponseMiddle = Opcode(0x0E)
	RCReadResponseLast   = Opcode(0x0F)
	RCReadResponseOnly   = Opcode(0x10)
	RCAcknowledge        = Opcode(0x11)
	RCAtomicAcknowledge  = Opcode(0x12)
	RCCompareSwap        = Opcode(0x13)
	RCFetchAdd           = Opcode(0x14)
	RCSendLastInvalidate = Opcode(0x16)
	RCSendOnlyInvalidate = Opcode(0x17)
	RCFlush              = Opcode(0x1C) // FETH and RETH; answered by an empty RDMA READ RESPONSE ONLY
	RCAtomicWrite        = Opcode(0x1D) // RETH and 8 bytes of payload; answered as FLUSH
	UCSendFirst          = Opcode(0x20)
	UCSendMiddle         = Opcode(0x21)
	UCSendLast           = Opcode(0x22)
	UCSendLastImm        = Opcode(0x23)
	UCSendOnly           = Opcode(0x24)
	UCSendOnlyImm        = Opcode(0x25)
	UCWriteFirst         = Opcode(0x26)
	UCWriteMiddle        = Opcode(0x27)
	UCWriteLast          = Opcode(0x28)
	UCWriteLastImm       = Opcode(0x29)
	UCWriteOnly          = Opcode(0x2A)
	UCWriteOnlyImm       = Opcode(0x2B)
	UDSendOnly           = Opcode(0x64)
	UDSendOnlyImm        = Opcode(0x65)
	CNP                  = Opcode(0x81)

	rdBase     = Opcode(0x40)
	opResync   = 0x15
	numOpcodes = 256
)

// Transport is the service an opcode belongs to.
type Transport uint8

// Transports.
const (
	TransportNone Transport = iota // reserved opcode
	TransportRC                    // Reliable Connected
	TransportUC                    // Unreliable Connected
	TransportRD                    // Reliable Datagram (decoded only)
	TransportUD                    // Unreliable Datagram
	TransportCNP                   // RoCEv2 Congestion Notification Packet
)

var transportNames = [...]string{"none", "RC", "UC", "RD", "UD", "CNP"}

// String returns "RC", "UC", "RD", "UD", "CNP" or "none".
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// Operation is what an opcode does, independent of transport and position.
type Operation uint8

// Operations.
const (
	OpNone Operation = iota
	OpSend
	OpWrite
	OpReadRequest
	OpReadResponse
	OpAcknowledge
	OpAtomicAcknowledge
	OpCompareSwap
	OpFetchAdd
	OpResync
	OpCNP
	OpFlush       // FLUSH (IBA A19, 0x1C): placement of earlier writes
	OpAtomicWrite // ATOMIC WRITE (IBA A19, 0x1D): 8 bytes written atomically
)

var operationNames = [...]string{"none", "SEND", "RDMA_WRITE", "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE",
	"ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD", "RESYNC", "CNP", "FLUSH", "ATOMIC_WRITE"}

// String returns the operation's name in the style of the opcode names.
func (o Operation) String() string {
	if int(o) < len(operationNames) {
		return operationNames[o]
	}
	return "Operation(" + strconv.Itoa(int(o)) + ")"
}

// Position says where a packet sits in a multi-packet message.
type Position uint8

// Positions. Opcodes that never span packets (READ REQUEST, ACKNOWLEDGE,
// atomics, CNP) have PosNone; they are whole messages by themselves.
const (
	PosNone Position = iota
	PosFirst
	PosMiddle
	PosLast
	PosOnly
)

var positionNames = [...]string{"-", "FIRST", "MIDDLE", "LAST", "ONLY"}

// String returns "FIRST", "MIDDLE", "LAST", "ONLY" or "-".
func (p Position) String() string {
	if int(p) < len(positionNames) {
		return positionNames[p]
	}
	return "Position(" + strconv.Itoa(int(p)) + ")"
}

// Starts reports whether a packet at this position begins a message.
func (p Position) Starts() bool { return p == PosFirst || p == PosOnly || p == PosNone }

// Ends reports whether a packet at this position ends a message.
func (p Position) Ends() bool { return p == PosLast || p == PosOnly || p == PosNone }

// HeaderMask is a set of extension headers.
type HeaderMask uint16

// Extension headers, in the order they appear after the BTH.
const (
	HasRDETH HeaderMask = 1 << iota
	HasDETH
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasCNPPad
	HasFETH    // FLUSH: placement type and selectivity level; it precedes the RETH
	numHeaders = iota
)

// headerLens[i] is the length of the header with bit i.
var headerLens = [numHeaders]uint8{RDETHLen, DETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, CNPPadLen, FETHLen}

var headerNames = [numHeaders]string{"RDETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPPad", "FETH"}

var headerTruncErrs = [numHeaders]*Error{ErrTruncatedRDETH, ErrTruncatedDETH, ErrTruncatedRETH, ErrTruncatedAtomicETH,
	ErrTruncatedAETH, ErrTruncatedAtomicAckETH, ErrTruncatedImmDt, ErrTruncatedIETH, ErrTruncatedCNP, ErrTruncatedFETH}

// headerOrder lists the header bits in the order the headers follow the BTH
// (the FETH, the last bit, goes before the RETH, as in IBA A19 and rxe).
var headerOrder = [numHeaders]int{hRDETH, hDETH, hFETH, hRETH, hAtomicETH, hAETH, hAtomicAckETH, hImmDt, hIETH, hCNPPad}

// String lists the headers, e.g. "RETH|ImmDt".
func (m HeaderMask) String() string {
	s := ""
	for i := 0; i < numHeaders; i++ {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += headerNames[i]
		}
	}
	return s
}

// OpcodeInfo describes one opcode: its name, which extension headers it
// carries and where, and what kind of packet it is.
type OpcodeInfo struct {
	Name       string     // e.g. "RC_RDMA_WRITE_ONLY"; "" for a reserved opcode
	Transport  Transport  // TransportNone for a reserved opcode
	Operation  Operation  // what the opcode does
	Position   Position   // FIRST/MIDDLE/LAST/ONLY, or PosNone
	Headers    HeaderMask // extension headers after the BTH
	Request    bool       // sent by a requester (false: a response)
	Payload    bool       // may carry payload
	Imm        bool       // carries immediate data (ImmDt)
	Invalidate bool       // carries an IETH (SEND with invalidate)
	HeaderLen  int        // BTH plus extension headers, in bytes
	offsets    [numHeaders]uint8
}

// Valid reports whether the opcode is defined.
func (i *OpcodeInfo) Valid() bool { return i.Transport != TransportNone }

// Offset returns the offset of extension header h (a single bit) from the
// start of the BTH, or 0 when the opcode does not carry it.
func (i *OpcodeInfo) Offset(h HeaderMask) int {
	if i.Headers&h == 0 || h == 0 || h&(h-1) != 0 {
		return 0
	}
	for b := 0; b < numHeaders; b++ {
		if h == 1<<b {
			return int(i.offsets[b])
		}
	}
	return 0
}

// Info returns the opcode's table entry. Reserved opcodes have an entry whose
// Valid method reports false.
func (o Opcode) Info() *OpcodeInfo { return &opcodeTable[o] }

// Valid reports whether the opcode is defined.
func (o Opcode) Valid() bool { return opcodeTable[o].Transport != TransportNone }

// String returns the opcode's name, or "UNKNOWN_0xNN".
func (o Opcode) String() string {
	if n := opcodeTable[o].Name; n != "" {
		return n
	}
	return unknownNames[o]
}

var unknownNames = func() (t [numOpcodes]string) {
	const hex = "0123456789abcdef"
	for i := range t {
		t[i] = "UNKNOWN_0x" + string([]byte{hex[i>>4], hex[i&15]})
	}
	return t
}()

// opDef describes the low five bits of an opcode, shared by the transports.
type opDef struct {
	name    string
	op      Operation
	pos     Position
	hdrs    HeaderMask
	payload bool
	resp    bool
}

var opDefs = map[uint8]opDef{
	0x00: {"SEND_FIRST", OpSend, PosFirst, 0, true, false},
	0x01: {"SEND_MIDDLE", OpSend, PosMiddle, 0, true, false},
	0x02: {"SEND_LAST", OpSend, PosLast, 0, true, false},
	0x03: {"SEND_LAST_WITH_IMMEDIATE", OpSend, PosLast, HasImmDt, true, false},
	0x04: {"SEND_ONLY", OpSend, PosOnly, 0, true, false},
	0x05: {"SEND_ONLY_WITH_IMMEDIATE", OpSend, PosOnly, HasImmDt, true, false},
	0x06: {"RDMA_WRITE_FIRST", OpWrite, PosFirst, HasRETH, true, false},
	0x07: {"RDMA_WRITE_MIDDLE", OpWrite, PosMiddle, 0, true, false},
	0x08: {"RDMA_WRITE_LAST", OpWrite, PosLast, 0, true, false},
	0x09: {"RDMA_WRITE_LAST_WITH_IMMEDIATE", OpWrite, PosLast, HasImmDt, true, false},
	0x0A: {"RDMA_WRITE_ONLY", OpWrite, PosOnly, HasRETH, true, false},
	0x0B: {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", OpWrite, PosOnly, HasRETH | HasImmDt, true, false},
	0x0C: {"RDMA_READ_REQUEST", OpReadRequest, PosNone, HasRETH, false, false},
	0x0D: {"RDMA_READ_RESPONSE_FIRST", OpReadResponse, PosFirst, HasAETH, true, true},
	0x0E: {"RDMA_READ_RESPONSE_MIDDLE", OpReadResponse, PosMiddle, 0, true, true},
	0x0F: {"RDMA_READ_RESPONSE_LAST", OpReadResponse, PosLast, HasAETH, true, true},
	0x10: {"RDMA_READ_RESPONSE_ONLY", OpReadResponse, PosOnly, HasAETH, true, true},
	0x11: {"ACKNOWLEDGE", OpAcknowledge, PosNone, HasAETH, false, true},
	0x12: {"ATOMIC_ACKNOWLEDGE", OpAtomicAcknowledge, PosNone, HasAETH | HasAtomicAckETH, false, true},
	0x13: {"COMPARE_SWAP", OpCompareSwap, PosNone, HasAtomicETH, false, false},
	0x14: {"FETCH_ADD", OpFetchAdd, PosNone, HasAtomicETH, false, false},
	0x16: {"SEND_LAST_WITH_INVALIDATE", OpSend, PosLast, HasIETH, true, false},
	0x17: {"SEND_ONLY_WITH_INVALIDATE", OpSend, PosOnly, HasIETH, true, false},
	0x1C: {"FLUSH", OpFlush, PosNone, HasFETH | HasRETH, false, false},
	0x1D: {"ATOMIC_WRITE", OpAtomicWrite, PosNone, HasRETH, true, false},
}

var opcodeTable = buildOpcodeTable()

func buildOpcodeTable() (t [numOpcodes]OpcodeInfo) {
	set := func(o Opcode, prefix string, tr Transport, d opDef, extra HeaderMask) {
		t[o] = OpcodeInfo{
			Name: prefix + d.name, Transport: tr, Operation: d.op, Position: d.pos,
			Headers: d.hdrs | extra, Request: !d.resp, Payload: d.payload,
		}
	}
	for low, d := range opDefs {
		// RC carries every operation.
		set(Opcode(low), "RC_", TransportRC, d, 0)
		// UC: SEND and RDMA WRITE, without invalidate.
		if low <= 0x0B {
			set(Opcode(0x20|low), "UC_", TransportUC, d, 0)
		}
		// RD: RDETH on everything, DETH on requests (IBA 9.3; rxe_opcode.c).
		if low <= 0x14 {
			extra := HasRDETH
			if !d.resp {
				extra |= HasDETH
			}
			set(rdBase|Opcode(low), "RD_", TransportRD, d, extra)
		}
	}
	t[rdBase|opResync] = OpcodeInfo{Name: "RD_RESYNC", Transport: TransportRD, Operation: OpResync, Headers: HasRDETH | HasDETH, Request: true}
	t[UDSendOnly] = OpcodeInfo{Name: "UD_SEND_ONLY", Transport: TransportUD, Operation: OpSend, Position: PosOnly, Headers: HasDETH, Request: true, Payload: true}
	t[UDSendOnlyImm] = OpcodeInfo{Name: "UD_SEND_ONLY_WITH_IMMEDIATE", Transport: TransportUD, Operation: OpSend, Position: PosOnly, Headers: HasDETH | HasImmDt, Request: true, Payload: true}
	t[CNP] = OpcodeInfo{Name: "CNP", Transport: TransportCNP, Operation: OpCNP, Headers: HasCNPPad, Request: true}
	for i := range t {
		info := &t[i]
		if info.Transport == TransportNone {
			continue
		}
		off := BTHLen
		for _, b := range headerOrder {
			if info.Headers&(1<<b) != 0 {
				info.offsets[b] = uint8(off)
				off += int(headerLens[b])
			}
		}
		info.HeaderLen = off
		info.Imm = info.Headers&HasImmDt != 0
		info.Invalidate = info.Headers&HasIETH != 0
	}
	return t
}
