package rdmacm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// RemoteBuffer is memory a peer may reach with RDMA READ, WRITE or atomics:
// its address, rkey and length, as an application hands it to the other
// side in a connection's private data.
type RemoteBuffer struct {
	Addr   uint64
	RKey   uint32
	Length uint32
}

// RemoteBufferSize is the length of a RemoteBuffer's wire form: the
// address, rkey and length, big-endian (16 bytes: it fits the private data
// of a REQ, 56 bytes, and of a REP, 196).
const RemoteBufferSize = 16

// ErrShortBuffer matches a RemoteBuffer's wire form cut short.
var ErrShortBuffer = errors.New("rdmacm: remote buffer: short")

// RemoteBufferOf describes the whole of mr (its address, rkey and length).
func RemoteBufferOf(mr verbs.MR) RemoteBuffer {
	return RemoteBuffer{Addr: mr.Addr(), RKey: mr.RKey(), Length: uint32(min(uint64(len(mr.Buf())), 1<<32-1))}
}

// AppendBinary appends b's wire form (RemoteBufferSize bytes) to dst.
func (b RemoteBuffer) AppendBinary(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, b.Addr)
	dst = binary.BigEndian.AppendUint32(dst, b.RKey)
	return binary.BigEndian.AppendUint32(dst, b.Length)
}

// MarshalBinary returns b's wire form.
func (b RemoteBuffer) MarshalBinary() ([]byte, error) { return b.AppendBinary(nil), nil }

// UnmarshalBinary reads a wire form from the start of data (bytes past
// RemoteBufferSize are ignored, as private data may carry more).
func (b *RemoteBuffer) UnmarshalBinary(data []byte) error {
	if len(data) < RemoteBufferSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrShortBuffer, len(data), RemoteBufferSize)
	}
	b.Addr = binary.BigEndian.Uint64(data)
	b.RKey = binary.BigEndian.Uint32(data[8:])
	b.Length = binary.BigEndian.Uint32(data[12:])
	return nil
}

// Slice returns the part of b from off, n bytes long, or false when it
// does not lie within b.
func (b RemoteBuffer) Slice(off, n uint32) (RemoteBuffer, bool) {
	if uint64(off)+uint64(n) > uint64(b.Length) {
		return RemoteBuffer{}, false
	}
	return RemoteBuffer{Addr: b.Addr + uint64(off), RKey: b.RKey, Length: n}, true
}
