//go:build !amd64 || purego

package wire

// haveCLMUL is false: transportRegister uses the tables and hash/crc32.
const haveCLMUL = false

// clmulRegister is never called (haveCLMUL is false).
func clmulRegister(v uint64, p []byte) uint32 { return 0 }
