//go:build !amd64 || purego

package wire

// foldRegister reports false: transportRegister uses hash/crc32.
func foldRegister(r uint32, p []byte) (uint32, bool) { return 0, false }
