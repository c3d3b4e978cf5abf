//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// haveCLMUL4 says whether the processor (and operating system) has the
// AVX-512 carry-less multiply on 512-bit registers that icrc4 uses.
var haveCLMUL4 = haveCLMUL && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VPCLMULQDQ

// icrc4 is the four-lane pass over four transport packets of n+ICRCLen
// bytes each (16 < n <= foldMax), the register before each the headers'
// register h (the lengths are equal: so are the headers) and the packet's
// masked byte 4, as Set and Check build it: with diff nil it writes each
// packet's ICRC into its last four bytes, as Set; else it writes nothing in
// the packets and sets diff[j] to packet j's ICRC as computed XOR as
// received (Diff's answer for it).
//
//go:noescape
func icrc4(h uint64, pkts *[4][]byte, n int, diff *[4]uint32)
