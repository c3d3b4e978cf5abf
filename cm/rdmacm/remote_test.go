package rdmacm

import (
	"bytes"
	"errors"
	"testing"
)

func TestRemoteBufferWire(t *testing.T) {
	b := RemoteBuffer{Addr: 0x0102030405060708, RKey: 0x090a0b0c, Length: 0x0d0e0f10}
	w := b.AppendBinary([]byte{0xff})
	want := []byte{0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if !bytes.Equal(w, want) {
		t.Fatalf("wire form % x, want % x", w, want)
	}
	var got RemoteBuffer
	if err := got.UnmarshalBinary(append(w[1:], 0xaa, 0xbb)); err != nil || got != b {
		t.Fatalf("UnmarshalBinary: %+v, %v", got, err)
	}
	if err := got.UnmarshalBinary(w[1:RemoteBufferSize]); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("15 bytes: %v", err)
	}
	if s, ok := b.Slice(16, 32); !ok || s.Addr != b.Addr+16 || s.Length != 32 || s.RKey != b.RKey {
		t.Errorf("Slice: %+v %v", s, ok)
	}
	if _, ok := b.Slice(b.Length-1, 2); ok {
		t.Error("Slice past the end accepted")
	}
}

func FuzzRemoteBuffer(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b RemoteBuffer
		if err := b.UnmarshalBinary(data); err != nil {
			return
		}
		if !bytes.Equal(b.AppendBinary(nil), data[:RemoteBufferSize]) {
			t.Fatal("round trip differs")
		}
	})
}
