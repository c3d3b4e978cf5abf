//go:build !amd64 || purego

package wire

// haveCLMUL4 is false: SetBatch seals each packet as Set does.
const haveCLMUL4 = false

// clmulRegister4 is never called (haveCLMUL4 is false).
func clmulRegister4(v *[4]uint64, p *[4]*byte, n int, out *[4]uint32) {}
