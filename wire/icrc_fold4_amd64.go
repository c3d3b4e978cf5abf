//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCLMUL4 says whether the processor (and operating system) has the
// AVX-512 carry-less multiply on 512-bit registers that clmulRegister4 uses.
var haveCLMUL4 = haveCLMUL && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VPCLMULQDQ

// clmulRegister4 is clmulRegister on four packets of n bytes each (16 < n
// <= foldMax): for packet j, from p[j], with v[j] XORed into its first
// eight bytes, it sets out[j] to the raw CRC register.
//
//go:noescape
func clmulRegister4(v *[4]uint64, p *[4]*byte, n int, out *[4]uint32)
