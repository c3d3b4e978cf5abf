//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCRCFold512 says whether the processor (and operating system) has
// what crcFold512 uses: icrc4z's (haveCLMUL4Z) and AVX-512BW byte masks on
// 128-bit registers (VL).
var haveCRCFold512 = haveCLMUL4Z && cpu.X86.HasAVX512VL

// crcFold512 returns the raw CRC register (no inversions) run from r over p,
// len(p) >= 64.
//
//go:noescape
func crcFold512(r uint32, p []byte) uint32
