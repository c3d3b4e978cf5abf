package wire

import "errors"

// Error is a wire-format error: a fixed message and the class or more general
// error it refines. Errors are package-level values so that returning one never
// allocates; match them with errors.Is.
type Error struct {
	msg    string
	parent error
}

// Error returns the message, prefixed "wire: ".
func (e *Error) Error() string { return e.msg }

// Unwrap returns the more general error this one refines.
func (e *Error) Unwrap() error { return e.parent }

func newErr(msg string, parent error) *Error { return &Error{msg: msg, parent: parent} }

// The two classes of parse error (see the package documentation).
var (
	// ErrMalformed is the class of packets a receiver must drop and count.
	ErrMalformed = errors.New("wire: malformed packet")
	// ErrInvalidRequest is the class of well-formed packets that a responder
	// answers with NAK "invalid request".
	ErrInvalidRequest = errors.New("wire: invalid request")
)

// Malformed packets.
var (
	ErrTruncated             = newErr("wire: truncated packet", ErrMalformed)
	ErrTruncatedBTH          = newErr("wire: truncated BTH", ErrTruncated)
	ErrTruncatedRDETH        = newErr("wire: truncated RDETH", ErrTruncated)
	ErrTruncatedDETH         = newErr("wire: truncated DETH", ErrTruncated)
	ErrTruncatedRETH         = newErr("wire: truncated RETH", ErrTruncated)
	ErrTruncatedAtomicETH    = newErr("wire: truncated AtomicETH", ErrTruncated)
	ErrTruncatedAETH         = newErr("wire: truncated AETH", ErrTruncated)
	ErrTruncatedAtomicAckETH = newErr("wire: truncated AtomicAckETH", ErrTruncated)
	ErrTruncatedImmDt        = newErr("wire: truncated ImmDt", ErrTruncated)
	ErrTruncatedIETH         = newErr("wire: truncated IETH", ErrTruncated)
	ErrTruncatedCNP          = newErr("wire: truncated CNP reserved field", ErrTruncated)
	ErrTruncatedFETH         = newErr("wire: truncated FETH", ErrTruncated)
	ErrTruncatedICRC         = newErr("wire: truncated ICRC", ErrTruncated)

	ErrUnknownOpcode     = newErr("wire: unknown opcode", ErrMalformed)
	ErrTVer              = newErr("wire: BTH TVer is not 0", ErrMalformed)
	ErrUnaligned         = newErr("wire: payload + pad not 4-byte aligned", ErrMalformed)
	ErrPadCount          = newErr("wire: pad count larger than the bytes after the headers", ErrMalformed)
	ErrPadNoPayload      = newErr("wire: pad count on an opcode that carries no payload", ErrMalformed)
	ErrPadNonZero        = newErr("wire: pad bytes non-zero (pad count wrong?)", ErrMalformed)
	ErrUnexpectedPayload = newErr("wire: payload on an opcode that carries no payload", ErrMalformed)
	ErrSyndrome          = newErr("wire: reserved AETH syndrome", ErrMalformed)
	ErrSyndromeNotACK    = newErr("wire: AETH syndrome on a READ response or ATOMIC ACKNOWLEDGE is not an ACK", ErrMalformed)
	ErrICRC              = newErr("wire: ICRC mismatch", ErrMalformed)
)

// Invalid requests: well formed, answered with NAK invalid request.
var (
	ErrPMTU          = newErr("wire: PMTU: payload length breaks the path MTU rule", ErrInvalidRequest)
	ErrPMTUFirst     = newErr("wire: PMTU: FIRST/MIDDLE payload is not exactly the path MTU, or is padded", ErrPMTU)
	ErrPMTULast      = newErr("wire: PMTU: LAST payload not in 1..path MTU", ErrPMTU)
	ErrPMTUOnly      = newErr("wire: PMTU: ONLY payload larger than the path MTU", ErrPMTU)
	ErrDMALength     = newErr("wire: RETH DMA length does not match the payload", ErrInvalidRequest)
	ErrAtomicAligned = newErr("wire: atomic VA not 8-byte aligned", ErrInvalidRequest)
)

// Builder and framing errors.
var (
	// ErrBuild is the class of errors returned by the builders.
	ErrBuild          = errors.New("wire: cannot build packet")
	ErrBuildOpcode    = newErr("wire: cannot build packet: unknown opcode", ErrBuild)
	ErrBuildPayload   = newErr("wire: cannot build packet: payload on an opcode that carries none", ErrBuild)
	ErrBuildRange     = newErr("wire: cannot build packet: QPN, PSN or MSN wider than 24 bits", ErrBuild)
	ErrBuildTooLong   = newErr("wire: cannot build packet: longer than 65535 bytes", ErrBuild)
	ErrBuildAddress   = newErr("wire: cannot build packet: source and destination must both be IPv4 or both IPv6", ErrBuild)
	ErrBuildPseudoHdr = newErr("wire: cannot compute ICRC: IP header is neither a 20-byte IPv4 nor a 40-byte IPv6 header followed by UDP", ErrBuild)

	// ErrFrame is the class of framing errors from ParseFrame.
	ErrFrame          = newErr("wire: bad frame", ErrMalformed)
	ErrFrameTruncated = newErr("wire: truncated Ethernet/IP/UDP header", ErrFrame)
	ErrNotIP          = newErr("wire: not an IPv4 or IPv6 packet", ErrFrame)
	ErrNotUDP         = newErr("wire: not a UDP packet", ErrFrame)
	ErrNotRoCEv2      = newErr("wire: UDP destination port is not 4791", ErrFrame)
	ErrIPChecksum     = newErr("wire: bad IPv4 header checksum", ErrFrame)
	ErrIPOptions      = newErr("wire: IPv4 options present (RoCEv2 uses a 20-byte header)", ErrFrame)
	ErrIPFragment     = newErr("wire: IPv4 fragment", ErrFrame)
	ErrIPLength       = newErr("wire: IP length does not match the frame", ErrFrame)
	ErrUDPLength      = newErr("wire: UDP length does not match the IP payload", ErrFrame)
	ErrUDPChecksum    = newErr("wire: bad UDP checksum", ErrFrame)
)
