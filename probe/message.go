package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// QKey is the Q_Key of every probe and ACK, rpingmesh's: a responder's UD
// queue pairs take it, and probers send with it.
const QKey = 0x11111111

// PayloadLen is the length of a probe or ACK payload (rpingmesh v1).
const PayloadLen = 40

// grhLen is the room for the GRH at the start of every UD receive buffer.
const grhLen = 40

// Message versions, types, ACK types and flags (rpingmesh v1).
const (
	// Version1 is the only version rpingmesh and goroce speak; a payload of
	// another version is rejected.
	Version1 = 1

	// TypeProbe is a probe, TypeAck an acknowledgement of one.
	TypeProbe = 0
	TypeAck   = 1

	// AckNone is the ACK type of a probe; AckFirst is the ACK sent at
	// once (it echoes T1 and carries T3), AckSecond the one sent after the
	// first's send completion (it also carries T4).
	AckNone   = 0
	AckFirst  = 1
	AckSecond = 2

	// FlagHardwareTimestamps is goroce's use of the flags byte, which
	// rpingmesh ignores: set in an ACK when the responder's T3 and T4 are
	// the device's hardware completion timestamps, and in a probe when the
	// prober's are. Other bits are sent as 0 and ignored.
	FlagHardwareTimestamps = 0x01
)

// Errors of ParseMessage.
var (
	// ErrTruncated: the payload is shorter than PayloadLen.
	ErrTruncated = errors.New("probe: truncated message")
	// ErrVersion: the version byte is not Version1.
	ErrVersion = errors.New("probe: unsupported message version")
	// ErrMalformed: the type and ACK type make no message (a probe with an
	// ACK type, an ACK without one, an unknown type).
	ErrMalformed = errors.New("probe: malformed message")
)

// Message is a probe or an ACK: the 40-byte payload of a RoCEv2 UD SEND
// ONLY, big endian:
//
//	 0  version  u8  (1)
//	 1  type     u8  (0 probe, 1 ACK)
//	 2  ack_type u8  (0 none, 1 first, 2 second)
//	 3  flags    u8  (FlagHardwareTimestamps; rpingmesh ignores them)
//	 4  seq      u64 (high 32 bits a random epoch, low 32 a counter)
//	12  t1       u64 (the prober's send time, echoed by both ACKs)
//	20  t3       u64 (the responder's receive completion, in both ACKs)
//	28  t4       u64 (the responder's first ACK send completion, in the second)
//	36  reserved 4 bytes (sent as 0, ignored)
//
// Times are nanoseconds on one clock per host.
type Message struct {
	Version, Type, AckType, Flags uint8
	Seq, T1, T3, T4               uint64
}

// Put writes m into the first PayloadLen bytes of b, the reserved bytes as
// 0. It returns ErrTruncated when b is shorter.
func (m *Message) Put(b []byte) error {
	if len(b) < PayloadLen {
		return ErrTruncated
	}
	b = b[:PayloadLen]
	b[0], b[1], b[2], b[3] = m.Version, m.Type, m.AckType, m.Flags
	binary.BigEndian.PutUint64(b[4:], m.Seq)
	binary.BigEndian.PutUint64(b[12:], m.T1)
	binary.BigEndian.PutUint64(b[20:], m.T3)
	binary.BigEndian.PutUint64(b[28:], m.T4)
	clear(b[36:40])
	return nil
}

// Append appends m's PayloadLen bytes to b.
func (m *Message) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, PayloadLen)...)
	m.Put(b[n:])
	return b
}

// ParseMessage decodes a payload. Bytes after the first PayloadLen are
// ignored, as are the reserved bytes. It returns ErrTruncated, ErrVersion
// or ErrMalformed (wrapped, with details) for a payload that is no v1
// message; it never panics.
func ParseMessage(b []byte) (Message, error) {
	if len(b) < PayloadLen {
		return Message{}, fmt.Errorf("%w: %d bytes, want %d", ErrTruncated, len(b), PayloadLen)
	}
	m := Message{
		Version: b[0], Type: b[1], AckType: b[2], Flags: b[3],
		Seq: binary.BigEndian.Uint64(b[4:]),
		T1:  binary.BigEndian.Uint64(b[12:]),
		T3:  binary.BigEndian.Uint64(b[20:]),
		T4:  binary.BigEndian.Uint64(b[28:]),
	}
	if m.Version != Version1 {
		return Message{}, fmt.Errorf("%w %d", ErrVersion, m.Version)
	}
	switch {
	case m.Type == TypeProbe && m.AckType == AckNone:
	case m.Type == TypeAck && (m.AckType == AckFirst || m.AckType == AckSecond):
	default:
		return Message{}, fmt.Errorf("%w: type %d, ack type %d", ErrMalformed, m.Type, m.AckType)
	}
	return m, nil
}
