//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCLMUL says whether the processor has the carry-less multiply (and
// SSSE3's PSHUFB, SSE4.1's PEXTRQ) that clmulFold uses.
var haveCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

// clmulFold folds p (16 < len(p) <= foldMax), with v XORed into its first
// eight bytes, into one 16-byte block congruent to it modulo the CRC
// polynomial when placed at p's last 16 bytes (see foldK), returned as two
// little-endian words.
//
//go:noescape
func clmulFold(v uint64, p []byte) (lo, hi uint64)
