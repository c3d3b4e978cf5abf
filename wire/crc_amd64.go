//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCRCFold512 says whether the processor (and operating system) has
// what crcFold512 uses: carry-less multiplication on 512-bit registers,
// AVX-512BW byte masks on 128-bit registers (VL), and the 128-bit forms.
var haveCRCFold512 = cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// crcFold512 returns the raw CRC register (no inversions) run from r over p,
// len(p) >= 64.
//
//go:noescape
func crcFold512(r uint32, p []byte) uint32
