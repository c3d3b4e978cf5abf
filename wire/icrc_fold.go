package wire

import "encoding/binary"

// Folding. hash/crc32 has a fixed cost per call of 15-20 ns on buffers of a
// few cache lines (its dispatch, then a carry-less-multiply loop that folds
// four 16-byte blocks into one serially before its reduction), which was
// most of the cost of the ICRC of a small packet. FlowICRC therefore hashes
// the transport packet (BTH to ICRC) itself, in assembly where the processor
// has carry-less multiply (clmulRegister): every 16-byte block of the packet
// is multiplied by the constant that moves it to the place of the last block
// (foldK) and the products XORed together, so the multiplications of a
// packet are independent and overlap in the processor instead of waiting for
// one another; a first partial block is shifted up behind zero bytes (which
// change nothing when the CRC starts from a zero register: the register
// carried in from the headers is XORed into the packet's first four bytes
// instead, and the BTH's masked byte is set to ones in the same XOR); the
// one block left goes through the slicing-by-16 tables. A packet of one
// block (an ACK) goes through the tables alone. Beyond foldMax bytes, and
// where the instructions are missing (or off amd64, or with the purego build
// tag), the BTH goes through the tables and the rest through crcUpdate
// (hash/crc32's CRC, folded with four 512-bit accumulators where the
// processor has them: crc.go).
//
// Measured with go test ./wire -bench ICRCBody (transportRegister against
// the tables plus hash/crc32, fastest of 10 runs): 6.6 against 18 ns for an
// ACK, 14 against 32 ns for a 64-byte WRITE ONLY, 24 against 43 ns at 284
// bytes, even from 512 bytes on (where it hands over). Reducing the last
// block by Barrett's method (four carry-less multiplications, each waiting
// on the one before) instead of the tables measured 5 ns slower; the
// tables' lookups in the assembly, with four accumulators, 2 ns faster than
// a call to crc16. An AVX-512 variant folding four blocks per instruction
// (VPCLMULQDQ on 512-bit registers) was no faster on a 64-byte WRITE and
// made the engine's BenchmarkPostPoll 2% slower; it was dropped. Four
// packets at once, one in each 128-bit lane, are another matter (Set4,
// Diff4: icrc_batch.go).

// foldK[d] holds the constants that move a 16-byte block d blocks (128*d
// bits) forward: a block is read as a polynomial of degree < 128 in the
// reflected bit order of the CRC (bit j of the little-endian 128-bit value is
// the coefficient of x^(127-j)); its low 64 bits L carry x^127..x^64, its
// high 64 bits H x^63..x^0, and
//
//	block * x^(128d) = L*x^(64+128d) + H*x^(128d)
//	                 ≡ clmul(L, reflect(x^(64+128d-1) mod P)) + clmul(H, reflect(x^(128d-1) mod P))
//
// where reflect puts the coefficient of x^m at bit 63-m and the "-1" makes
// up for the carry-less product of two 64-bit reflected values landing one
// bit short of the 128-bit reflected order. The result, congruent modulo P,
// has fewer than 96 bits and is XORed into the block d further on.
// foldK[0] is unused (the last block is not moved).
var foldK = func() (k [foldMax / 16][2]uint64) {
	for d := 1; d < len(k); d++ {
		k[d][0] = reflect64(xPowMod(64 + 128*d - 1))
		k[d][1] = reflect64(xPowMod(128*d - 1))
	}
	return k
}()

// foldMax is the longest run clmulRegister takes (foldK's reach); longer ones
// go to crcUpdate, whose fixed cost is small beside them.
const foldMax = 512

// foldShuf holds PSHUFB masks: the 16 bytes at o shift a block up by 16-o
// bytes, those at 16+o shift it down by o bytes (0x80 clears a byte).
var foldShuf = func() (t [48]byte) {
	for i := range t {
		t[i] = 0x80
	}
	for i := range 16 {
		t[16+i] = byte(i)
	}
	return t
}()

// xPowMod returns x^n modulo the CRC-32 polynomial, in the normal bit order
// (bit i is the coefficient of x^i).
func xPowMod(n int) uint64 {
	const poly = 1<<32 | 0x04C11DB7
	v := uint64(1)
	for range n {
		v <<= 1
		if v&(1<<32) != 0 {
			v ^= poly
		}
	}
	return v
}

// reflect64 returns the polynomial v (degree < 64) with the coefficient of
// x^m at bit 63-m.
func reflect64(v uint64) uint64 {
	var r uint64
	for m := range 64 {
		if v>>m&1 != 0 {
			r |= 1 << (63 - m)
		}
	}
	return r
}

// transportRegister runs the raw CRC register r over p, the transport packet
// from its BTH up to its ICRC (at least BTHLen bytes), with the BTH's byte 4
// (FECN, BECN, resv6a) taken as ones, as the ICRC masks it.
func transportRegister(r uint32, p []byte) uint32 {
	if haveCLMUL && len(p) > 16 && len(p) <= foldMax {
		return clmulRegister(uint64(r)|uint64(^p[4])<<32, p)
	}
	return tableRegister(r, p)
}

// tableRegister is transportRegister by the tables and crcUpdate: for a
// packet of one block (an ACK), which the tables take faster, one longer than
// foldMax, or without clmulRegister.
func tableRegister(r uint32, p []byte) uint32 {
	le := binary.LittleEndian
	if len(p) == 16 {
		return crc16(r, le.Uint64(p)|maskBTHWord1<<32, le.Uint64(p[8:]))
	}
	r = crc8(r, le.Uint64(p)|maskBTHWord1<<32)
	r = crc4(r, le.Uint32(p[8:]))
	rest := p[BTHLen:]
	if len(rest) < crcFoldMin {
		// A short rest (the extension headers FlowICRC.SetV hashes; their
		// lengths are multiples of 4) by the tables, word by word: through
		// hash/crc32 16 bytes of RETH cost 3% of a 4 KiB WRITE sender.
		for ; len(rest) >= 16; rest = rest[16:] {
			r = crc16(r, le.Uint64(rest), le.Uint64(rest[8:]))
		}
		if len(rest) >= 8 {
			r, rest = crc8(r, le.Uint64(rest)), rest[8:]
		}
		if len(rest) >= 4 {
			r, rest = crc4(r, le.Uint32(rest)), rest[4:]
		}
		if len(rest) == 0 {
			return r
		}
	}
	return ^crcUpdate(^r, rest)
}
