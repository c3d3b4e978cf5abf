package wire

import "hash/crc32"

// Long runs. The part of an ICRC after the BTH of a large packet (a 1-4 KiB
// payload) is a plain CRC-32 over many bytes. hash/crc32 folds with one
// 512-bit accumulator from 1 KiB on (and one 128-bit one below), so each
// 64-byte step waits for the carry-less multiplication of the step before.
// crcFold512 keeps four 512-bit accumulators 256 bytes apart, whose
// multiplications overlap, then folds them into one (crcFoldK), that one's
// four 128-bit lanes into one, takes the last blocks (a partial one shifted
// as clmulRegister does) and reduces the 128 bits left by Barrett's method
// (barrett4's first lane).
//
// go test ./wire -bench CRCUpdate (benchstat, eight interleaved runs) on a
// Zen 5 class processor: 79 against 165 ns at 4 KiB (48 against 23 GiB/s),
// 1.24 against 2.39 us at 64 KiB, 30 against 57 ns at 1 KiB, and 12-15%
// less from 64 to 256 bytes. Eight accumulators (512 bytes a step) were no
// faster at 4 or 64 KiB: four already keep the carry-less multiplier busy.

// crcFoldMin is the shortest run crcUpdate hands to crcFold512, which needs
// 64 bytes; shorter ones go to hash/crc32. go test ./wire -bench CRCFoldMin
// measured crcFold512 15-20% faster than hash/crc32 from 64 to 192 bytes
// (20.5 against 23.8 ns at 64), so it takes every run it can.
const crcFoldMin = 64

// crcFoldK holds the constant pairs (see foldPair) that crcFold512 uses:
// for the four accumulators' step (2048 bits), for folding the first three
// accumulators onto the fourth (1536, 1024 and 512 bits; 512 is also the
// step of one accumulator), then, laid out as one 512-bit vector, for
// folding lanes 0-2 of the one accumulator onto lane 3 (384, 256 and 128
// bits; 128 is also the step of one block) and zero for lane 3 itself.
var crcFoldK = [8][2]uint64{
	foldPair(2048), foldPair(1536), foldPair(1024), foldPair(512),
	foldPair(384), foldPair(256), foldPair(128), {0, 0},
}

// foldPair returns the two constants that move a 16-byte block d bits
// forward (d a positive multiple of 128), as foldK does for d = 128*i:
// [reflect(x^(d+63) mod P), reflect(x^(d-1) mod P)], for the block's low
// and high 64 bits. The carry-less products of the halves with them, XORed,
// are congruent modulo P to the block times x^d, so XORed into the block d
// bits further on they leave the CRC unchanged.
func foldPair(d int) [2]uint64 {
	return [2]uint64{reflect64(xPowMod(d + 63)), reflect64(xPowMod(d - 1))}
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p), faster on long p
// where the processor has carry-less multiplication on 512-bit registers.
func crcUpdate(crc uint32, p []byte) uint32 {
	if haveCRCFold512 && len(p) >= crcFoldMin {
		return ^crcFold512(^crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}
