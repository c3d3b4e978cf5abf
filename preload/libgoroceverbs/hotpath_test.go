//go:build linux && cgo && ibverbs

package main

import "testing"

// TestHotPathAllocs: the library's post_recv, post_send and poll_cq (with
// the soft engine under them) allocate nothing per message, inline data
// copied or not.
func TestHotPathAllocs(t *testing.T) {
	t.Setenv("GOROCE_ADDR", "127.0.34.11")
	t.Setenv("GOROCE_PATH", "udp")
	for _, inline := range []bool{false, true} {
		got, err := allocsPerMessage(2000, inline)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("inline %v: %.3f allocations a message", inline, got)
		if got > 0.05 {
			t.Errorf("inline %v: %.3f allocations a message (post_recv, post_send, poll_cq), want none", inline, got)
		}
	}
}
