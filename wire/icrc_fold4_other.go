//go:build !amd64 || purego

package wire

// haveCLMUL4 is false: Set4 and Diff4 refuse every group, and SetBatch
// seals each packet as Set does.
const haveCLMUL4 = false

// icrc4 is never called (haveCLMUL4 is false).
func icrc4(h uint64, pkts *[4][]byte, n int, diff *[4]uint32) {}
