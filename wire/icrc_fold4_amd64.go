//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCLMUL4Z says whether the processor (and operating system) has the
// AVX-512 carry-less multiply on 512-bit registers that icrc4z uses.
var haveCLMUL4Z = haveCLMUL && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VPCLMULQDQ

// haveCLMUL4Y says whether it has the carry-less multiply on 256-bit
// registers (VPCLMULQDQ with AVX2, without AVX-512: AMD Zen 3, Intel
// Alder Lake's cores) that icrc4y uses. golang.org/x/sys/cpu reports
// VPCLMULQDQ only beside AVX-512, so its CPUID bit (leaf 7, ECX bit 10)
// is read here; HasAVX2 includes the operating system's saving the YMM
// registers.
var haveCLMUL4Y = haveCLMUL && cpu.X86.HasAVX2 && hasVPCLMULQDQ()

// haveCLMUL4 says whether the four-lane pass runs: on 512-bit registers
// where it can, else on two 256-bit ones.
var haveCLMUL4 = haveCLMUL4Z || haveCLMUL4Y

func hasVPCLMULQDQ() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// cpuid runs the CPUID instruction for leaf eax, subleaf ecx.
func cpuid(eax, ecx uint32) (a, b, c, d uint32)

// icrc4 is the four-lane pass over four transport packets of n+ICRCLen
// bytes each (16 < n <= foldMax), the register before each the headers'
// register h (the lengths are equal: so are the headers) and the packet's
// masked byte 4, as Set and Check build it: with diff nil it writes each
// packet's ICRC into its last four bytes, as Set; else it writes nothing in
// the packets and sets diff[j] to packet j's ICRC as computed XOR as
// received (Diff's answer for it).
func icrc4(h uint64, pkts *[4][]byte, n int, diff *[4]uint32) {
	if haveCLMUL4Z {
		icrc4z(h, pkts, n, diff)
		return
	}
	icrc4y(h, pkts, n, diff)
}

// icrc4z is icrc4 on 512-bit registers, a packet in each 128-bit lane.
//
//go:noescape
func icrc4z(h uint64, pkts *[4][]byte, n int, diff *[4]uint32)

// icrc4y is icrc4 on two 256-bit registers, packets 0 and 1 in one and 2
// and 3 in the other.
//
//go:noescape
func icrc4y(h uint64, pkts *[4][]byte, n int, diff *[4]uint32)
