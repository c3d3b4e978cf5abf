package packetio

import "testing"

// SendTOS keeps the DSCP, sets ECT(0) in an ECN field left 0, keeps one
// set, and clears it with noECN.
func TestSendTOS(t *testing.T) {
	tests := []struct {
		tos   uint8
		noECN bool
		want  uint8
	}{
		{0, false, ECT0},
		{46 << 2, false, 46<<2 | ECT0},
		{ECT1, false, ECT1},
		{CE, false, CE},
		{46<<2 | ECT0, false, 46<<2 | ECT0},
		{0, true, NotECT},
		{46<<2 | CE, true, 46 << 2},
		{0xFF, true, 0xFC},
	}
	for _, tt := range tests {
		if got := SendTOS(tt.tos, tt.noECN); got != tt.want {
			t.Errorf("SendTOS(%#02x, %v) = %#02x, want %#02x", tt.tos, tt.noECN, got, tt.want)
		}
	}
}

// NoteKernelRxDrops32 follows a 32-bit count across its wrap, and ignores
// 0 (no count reported) and a count seen before.
func TestNoteKernelRxDrops32(t *testing.T) {
	var c Counters
	for _, step := range []struct {
		total uint32
		want  uint64
	}{
		{0, 0}, {5, 5}, {5, 5}, {0, 5}, {1 << 31, 1 << 31}, {0xFFFFFFFF, 0xFFFFFFFF}, {3, 1<<32 + 3},
	} {
		c.NoteKernelRxDrops32(step.total)
		if got := c.KernelRxDrops.Load(); got != step.want {
			t.Fatalf("after %d: %d, want %d", step.total, got, step.want)
		}
		if s := c.Stats(); s.KernelRxDrops != step.want {
			t.Fatalf("Stats().KernelRxDrops %d, want %d", s.KernelRxDrops, step.want)
		}
	}
}
