//go:build linux && cgo && ibverbs

package main

import (
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestLastACKBeforeDestroy: between two network namespaces, a peer sends
// one message to a fresh RC QP of the library's device in each round, and
// the library's side destroys its QP as soon as it has polled the receive
// (ibv_destroy_qp right after the last ibv_poll_cq, as ibv_rc_pingpong's
// client does). The ACK of that message must have left before destroy
// returned (the device's packet counter), and the peer's SEND must complete
// successfully: the peer may send a message again once (a late ACK, on a
// machine so loaded that its 67 ms timer ran out), and fails the SEND if that
// finds the QP gone too. The log has the peer's retransmissions and the
// packets that reached the library's device for no QP.
func TestLastACKBeforeDestroy(t *testing.T) {
	netns.Require(t)
	pair := netns.NewPair(t, netns.Options{})
	const rounds = 20
	r, err := lastACK(pair.A.Do, pair.B.Do, pair.AddrA, pair.AddrB, rounds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Rounds != rounds || r.AckedBefore != rounds || r.PeerOK != rounds {
		t.Errorf("of %d rounds, %d had sent the ACK when ibv_destroy_qp returned and %d completed the peer's SEND, want all", r.Rounds, r.AckedBefore, r.PeerOK)
	}
}
