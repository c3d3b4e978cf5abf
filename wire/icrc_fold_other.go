//go:build !amd64 || purego

package wire

// haveCLMUL is false: transportRegister uses the tables and hash/crc32.
const haveCLMUL = false

// clmulFold is never called (haveCLMUL is false).
func clmulFold(v uint64, p []byte) (lo, hi uint64) { return 0, 0 }
