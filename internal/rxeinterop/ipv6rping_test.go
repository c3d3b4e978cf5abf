package rxeinterop

import (
	"fmt"
	"testing"
)

// TestIPv6RpingRxe runs rdma-core's rping client on rdma_rxe over IPv6
// (rping -c -a fd99::1, rxe0's GID index 2) against goroce rping -s on
// fd99::1: rdma_cm over IPv6 with a Linux client (REQ, REP, RTU over
// RoCEv2/IPv6 to QP 1), 50 verified pings, the disconnect, and a capture
// all IPv6 that the wire checker passes. TestIPv6Rxe has the other
// direction (goroce's client towards rping -s -a fd99::2).
func TestIPv6RpingRxe(t *testing.T) {
	h := newHarness(t)
	// Boot the guest with the namespace's IPv6 address as the first pair.
	h.startPeer("v6-setup", "ip -6 addr show dev eth0", ipv6Setup+" && ip -6 addr show dev br0")
	if r := h.peerResult(t); r.guestRC != 0 || r.hostErr != nil {
		t.Fatalf("setting up IPv6: guest %d, host %v\n%s\n%s", r.guestRC, r.hostErr, r.guestOut, r.hostOut)
	}
	server := []string{h.bin, "rping", "-s", "-a", hostIP6, "--path", "udp", "-v", "-d", "--timeout", "60s"}
	r := h.pair(t, "v6-rping-goroce-server", fmt.Sprintf("rping -c -a %s -C %d -v -V", hostIP6, rpingCount), ipv6Host(server), true)
	checkRping(t, r, r.hostOut, r.guestOut)
	h.checkCapture(t, r.pcap)
	checkIPv6Capture(t, h, r.pcap)
}
