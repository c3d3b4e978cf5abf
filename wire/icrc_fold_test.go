package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// refTransportRegister is transportRegister done plainly: hash/crc32 over a
// copy of p with its byte 4 set to ones.
func refTransportRegister(r uint32, p []byte) uint32 {
	m := append([]byte(nil), p...)
	m[4] = 0xFF
	return ^crc32.Update(^r, crc32.IEEETable, m)
}

// TestTransportRegister: the folded CRC agrees with hash/crc32 over the
// masked bytes at every length from a bare BTH to past foldMax (where it
// hands over to hash/crc32), whatever the starting register and the BTH's
// byte 4, and a flipped bit anywhere but in byte 4 changes it.
func TestTransportRegister(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := BTHLen; n <= 2*foldMax+40; n++ {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		for range 3 {
			r := rng.Uint32()
			want := refTransportRegister(r, p)
			if got := transportRegister(r, p); got != want {
				t.Fatalf("%d bytes, register %#x: %#x, want %#x", n, r, got, want)
			}
			p[4] = byte(rng.Uint32()) // masked: no change
			if got := transportRegister(r, p); got != want {
				t.Fatalf("%d bytes, register %#x, byte 4 %#x: %#x, want %#x", n, r, p[4], got, want)
			}
			i := rng.IntN(n)
			if i == 4 {
				i = 5
			}
			p[i] ^= 1 << rng.IntN(8)
			if got := transportRegister(r, p); got == want {
				t.Fatalf("%d bytes: byte %d flipped, register unchanged", n, i)
			}
		}
	}
}

// FuzzTransportRegister: the folded CRC agrees with hash/crc32 over the
// masked bytes.
func FuzzTransportRegister(f *testing.F) {
	f.Add(uint32(0), make([]byte, 92))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 16))
	f.Add(uint32(0x12345678), make([]byte, 301))
	f.Fuzz(func(t *testing.T, r uint32, p []byte) {
		if len(p) < BTHLen {
			return
		}
		if got, want := transportRegister(r, p), refTransportRegister(r, p); got != want {
			t.Fatalf("%d bytes, register %#x: %#x, want %#x", len(p), r, got, want)
		}
	})
}

// crc32TransportRegister is what transportRegister did before folding: the
// tables over the BTH, hash/crc32 over the rest.
func crc32TransportRegister(r uint32, p []byte) uint32 {
	le := binary.LittleEndian
	r = crc8(r, le.Uint64(p)|maskBTHWord1<<32)
	r = crc4(r, le.Uint32(p[8:]))
	return ^crc32.Update(^r, crc32.IEEETable, p[BTHLen:])
}

// BenchmarkICRCBody: the transport packet's share of an ICRC (BTH to ICRC,
// as FlowICRC hashes it) by transportRegister beside the tables plus
// hash/crc32 (crc32), for packets of these lengths (92: a 64-byte WRITE
// ONLY; 16: an ACK).
func BenchmarkICRCBody(b *testing.B) {
	for _, n := range []int{16, 44, 92, 284, 524, 1052, 4124} {
		p := make([]byte, n)
		var sink uint32
		b.Run("fold/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sink = transportRegister(sink, p)
			}
		})
		b.Run("crc32/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sink = crc32TransportRegister(sink, p)
			}
		})
	}
}
