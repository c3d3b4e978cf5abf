//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCLMUL says whether the processor has the carry-less multiply (and
// SSSE3's PSHUFB, SSE4.1's PEXTRQ) that clmulRegister uses.
var haveCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

// clmulRegister returns the raw CRC register, from zero, over p (16 <
// len(p) <= foldMax) with v XORed into its first eight bytes: the blocks of p
// are folded into one congruent to p modulo the CRC polynomial when placed at
// p's last 16 bytes (see foldK), which the slicing-by-16 tables (crcTables)
// reduce as crc16(0, lo, hi) does.
//
//go:noescape
func clmulRegister(v uint64, p []byte) uint32
