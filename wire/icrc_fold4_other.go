//go:build !amd64 || purego

package wire

// haveCLMUL4 is false: SetBatch seals each packet as Set does.
const haveCLMUL4 = false

// clmulRegister4 is never called (haveCLMUL4 is false).
func clmulRegister4(v *[4]uint64, p *[4]*byte, n int, out *[4]uint32) {}

// icrc4 is never called (haveCLMUL4 is false).
func icrc4(h uint64, pkts *[4][]byte, n int, check bool) uint8 { return 0 }
