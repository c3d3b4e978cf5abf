package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// crcTestInits are the starting CRCs the crcUpdate tests run from: zero, all
// ones, the CRC an ICRC has after its LRH, and two arbitrary ones.
var crcTestInits = []uint32{0, 0xFFFFFFFF, crcAfterLRH, 0x12345678, 0x9E3779B9}

// TestCRCUpdate: crcUpdate agrees with hash/crc32 at every length from 0 to
// 5000 bytes and at 64 KiB, from several starting CRCs and at several
// alignments, with other bytes on either side of p.
func TestCRCUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 65536+128)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := make([]int, 0, 5002)
	for n := 0; n <= 5000; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 65536)
	t.Logf("crcFold512 in use: %v", haveCRCFold512)
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3, 8, 17, 63} {
			p := buf[off : off+n]
			for _, c := range crcTestInits {
				want := crc32.Update(c, crc32.IEEETable, p)
				if got := crcUpdate(c, p); got != want {
					t.Fatalf("%d bytes at offset %d from %#x: %#x, want %#x", n, off, c, got, want)
				}
				// Below crcFoldMin too, which crcUpdate does not hand over.
				if haveCRCFold512 && n >= 64 {
					if got := ^crcFold512(^c, p); got != want {
						t.Fatalf("crcFold512: %d bytes at offset %d from %#x: %#x, want %#x", n, off, c, got, want)
					}
				}
			}
		}
	}
}

// TestCRCUpdateBitFlips: a flipped bit anywhere in p changes crcUpdate's
// result as it changes hash/crc32's (the error patterns of the last blocks,
// which the folds treat apart, included).
func TestCRCUpdateBitFlips(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{64, 100, 255, 256, 257, 319, 1000, 4100, 4112} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		for i := range n {
			b := byte(1) << rng.IntN(8)
			p[i] ^= b
			if got, want := crcUpdate(0, p), crc32.ChecksumIEEE(p); got != want {
				t.Fatalf("%d bytes, byte %d flipped: %#x, want %#x", n, i, got, want)
			}
			p[i] ^= b
		}
	}
}

// clmul64 is the carry-less product of a and b: 128 bits as (lo, hi).
func clmul64(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return lo, hi
}

// TestCRCFoldK checks each constant pair of crcFoldK by what it is for:
// a block moved d bits forward by it, then taken alone, leaves the CRC
// register (from zero) that the block followed by d/8 zero bytes leaves.
// The distances are listed here independently of the generator.
func TestCRCFoldK(t *testing.T) {
	dists := []int{2048, 1536, 1024, 512, 384, 256, 128}
	if crcFoldK[len(crcFoldK)-1] != [2]uint64{} {
		t.Fatalf("lane 3 constants %#x, want zero", crcFoldK[len(crcFoldK)-1])
	}
	reg0 := func(m []byte) uint32 { return ^crc32.Update(0xFFFFFFFF, crc32.IEEETable, m) }
	rng := rand.New(rand.NewPCG(9, 10))
	le := binary.LittleEndian
	for i, d := range dists {
		k := crcFoldK[i]
		if k[0]&0xFFFFFFFF != 0 || k[1]&0xFFFFFFFF != 0 {
			t.Errorf("distance %d: constants %#x have more than 32 bits", d, k)
		}
		for range 50 {
			m := make([]byte, 16+d/8)
			l, h := rng.Uint64(), rng.Uint64()
			le.PutUint64(m, l)
			le.PutUint64(m[8:], h)
			lo0, hi0 := clmul64(l, k[0])
			lo1, hi1 := clmul64(h, k[1])
			var f [16]byte
			le.PutUint64(f[:], lo0^lo1)
			le.PutUint64(f[8:], hi0^hi1)
			if got, want := reg0(f[:]), reg0(m); got != want {
				t.Fatalf("distance %d (crcFoldK[%d]): folded block's register %#x, want %#x", d, i, got, want)
			}
		}
	}
}

// TestCRCUpdateAllocs: crcUpdate allocates nothing.
func TestCRCUpdateAllocs(t *testing.T) {
	p := make([]byte, 4100)
	if a := testing.AllocsPerRun(100, func() { _ = crcUpdate(1, p) }); a != 0 {
		t.Errorf("%v allocations", a)
	}
}

// FuzzCRCUpdate: crcUpdate agrees with hash/crc32 from any starting CRC,
// over any bytes at any alignment. The run is b repeated to len(b)+n bytes,
// so that the fuzzer, which does not see which lengths the assembly treats
// apart, reaches the long ones.
func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), uint8(0), uint16(0), make([]byte, 256))
	f.Add(uint32(0xFFFFFFFF), uint8(1), uint16(4000), []byte("a 4 KiB payload and some"))
	f.Add(uint32(0x12345678), uint8(5), uint16(65), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, c uint32, off uint8, n uint16, b []byte) {
		if len(b) == 0 {
			b = []byte{0}
		}
		m := make([]byte, len(b)+int(n%8192)+64)
		for i := range m {
			m[i] = b[i%len(b)]
		}
		p := m[off%64 : len(m)-64+int(off%64)]
		want := crc32.Update(c, crc32.IEEETable, p)
		if got := crcUpdate(c, p); got != want {
			t.Fatalf("%d bytes from %#x: %#x, want %#x", len(p), c, got, want)
		}
		if haveCRCFold512 && len(p) >= 64 {
			if got := ^crcFold512(^c, p); got != want {
				t.Fatalf("crcFold512: %d bytes from %#x: %#x, want %#x", len(p), c, got, want)
			}
		}
	})
}

// BenchmarkCRCUpdate: crcUpdate (fold) beside hash/crc32 (crc32) over runs
// of these lengths.
func BenchmarkCRCUpdate(b *testing.B) {
	for _, n := range []int{64, 128, 256, 1024, 4096, 65536} {
		p := make([]byte, n)
		var sink uint32
		b.Run("crc32/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink = crc32.Update(sink, crc32.IEEETable, p)
			}
		})
		b.Run("fold/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink = crcUpdate(sink, p)
			}
		})
	}
}

// BenchmarkCRCFoldMin: crcFold512 itself beside hash/crc32 on short runs,
// where crcFoldMin is chosen.
func BenchmarkCRCFoldMin(b *testing.B) {
	if !haveCRCFold512 {
		b.Skip("no crcFold512")
	}
	for _, n := range []int{64, 80, 96, 128, 160, 192} {
		p := make([]byte, n)
		var sink uint32
		b.Run("crc32/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sink = crc32.Update(sink, crc32.IEEETable, p)
			}
		})
		b.Run("fold/"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				sink = ^crcFold512(^sink, p)
			}
		})
	}
}
