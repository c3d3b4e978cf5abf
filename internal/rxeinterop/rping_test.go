package rxeinterop

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// rpingCount is the pings of each rping run.
const rpingCount = 50

// TestRpingRxe runs goroce rping against rdma-core's rping on rdma_rxe,
// each as server and as client (-C 50 -V -v): rdma_cm's connection over
// the IB CM on QP 1 (REQ, REP, RTU; DREQ, DREP at the end), then 50 pings
// of RDMA READ, SEND and RDMA WRITE, each verified by the client; the
// outputs are compared ping by ping and the captures checked.
func TestRpingRxe(t *testing.T) {
	h := newHarness(t)
	client := []string{h.bin, "rping", "-c", "-a", guestIP, "--addr", hostIP, "--path", "udp", "-C", fmt.Sprint(rpingCount),
		"-v", "-V", "--timeout", "60s"}
	h.startPeer("rping-rxe-server", fmt.Sprintf("rping -s -a %s -v -V", guestIP), shellJoin(client))
	t.Run("rxe-server", func(t *testing.T) {
		r := h.peerResult(t)
		checkRping(t, r, r.guestOut, r.hostOut)
		h.checkCapture(t, r.pcap)
	})
	t.Run("goroce-server", func(t *testing.T) {
		server := []string{h.bin, "rping", "-s", "-a", hostIP, "--path", "udp", "-v", "-d", "--timeout", "60s"}
		r := h.pair(t, "rping-goroce-server", fmt.Sprintf("rping -c -a %s -C %d -v -V", hostIP, rpingCount), server, true)
		checkRping(t, r, r.hostOut, r.guestOut)
		h.checkCapture(t, r.pcap)
	})
	// Again with nftables in the host's namespace dropping one CM MAD in
	// three at random (UD SEND ONLY, BTH opcode 0x64) both ways: REQ, REP,
	// RTU, DREQ and DREP are resent by either side until they pass. Spared: the DREQ
	// of a Linux rping client. rping destroys its rdma_cm id right after
	// rdma_disconnect, which cancels the DREQ's resends (ib_cm enters
	// time-wait), so a lost one leaves any server, Linux's own too, waiting
	// for a disconnect that never comes.
	for _, goroceServer := range []bool{false, true} {
		name := "rxe-server-cm-loss"
		gcmd := fmt.Sprintf("rping -s -a %s -v -V", guestIP)
		host := append([]string(nil), client...)
		if goroceServer {
			name = "goroce-server-cm-loss"
			gcmd = fmt.Sprintf("rping -c -a %s -C %d -v -V", hostIP, rpingCount)
			host = []string{h.bin, "rping", "-s", "-a", hostIP, "--path", "udp", "-v", "-d", "--timeout", "100s"}
		}
		t.Run(name, func(t *testing.T) {
			r := h.pair(t, "rping-"+name, gcmd, []string{"sh", "-c", nftDropCM + "; " + shellJoin(host) + "; rc=$?; " + nftReport + "; exit $rc"}, goroceServer)
			if goroceServer {
				checkRping(t, r, r.hostOut, r.guestOut)
			} else {
				checkRping(t, r, r.guestOut, r.hostOut)
			}
			m := regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(r.hostOut, -1)
			dropped := 0
			for _, x := range m {
				n, _ := strconv.Atoi(x[1])
				dropped += n
			}
			t.Logf("nftables dropped %d CM MADs", dropped)
			if len(m) != 2 {
				t.Errorf("no nftables counters in the host's output")
			}
			h.checkCapture(t, r.pcap)
		})
	}
}

// nftDropCM drops one in three UD SEND ONLYs at random (opcode 0x64: on
// these runs, only CM MADs) to UDP 4791 in both directions, but for DREQs
// (attribute 0x0015, at byte 16 of the MAD: UDP header, BTH and DETH are
// 28 bytes) coming in; nftReport lists the counters and removes the table.
// One in two made a REQ and its REP both pass one attempt in four, and
// Linux's client resends its REQ about every 8 s: all of the dozen that fit
// the 100 s failed in about 3 % of runs. One in three still loses a MAD in
// most runs, and fails that way in 0.1 %.
const (
	nftDropCM = `nft add table inet goroce_cmdrop && ` +
		`nft add chain inet goroce_cmdrop in '{ type filter hook input priority 0; }' && ` +
		`nft add chain inet goroce_cmdrop out '{ type filter hook output priority 0; }' && ` +
		`nft add rule inet goroce_cmdrop in udp dport 4791 @th,64,8 0x64 @th,352,16 != 0x0015 numgen random mod 3 == 0 counter drop && ` +
		`nft add rule inet goroce_cmdrop out udp dport 4791 @th,64,8 0x64 numgen random mod 3 == 0 counter drop`
	nftReport = `nft list table inet goroce_cmdrop | grep counter; nft delete table inet goroce_cmdrop`
)

// checkRping checks an rping pair's outputs: both ended well, the server
// printed every ping it read and the client every ping that came back,
// identical, and each side saw the disconnect.
func checkRping(t *testing.T, r result, serverOut, clientOut string) {
	t.Helper()
	t.Logf("guest (rc=%d): %s\n%s", r.guestRC, r.guestCmd, lastLines(r.guestOut, 4))
	t.Logf("host (%v): %s\n%s", r.hostErr, r.hostCmd, lastLines(r.hostOut, 4))
	guestRC := r.guestRC
	if guestRC == 255 && strings.Contains(r.guestOut, "client DISCONNECT EVENT") && strings.Contains(r.guestOut, "rdma_get_cm_event: Bad file descriptor") {
		// rping's own teardown race, after the test: its rdma_cm event
		// thread, still reading once the client has disconnected, finds
		// the event channel main has just destroyed and exits the
		// process with -1. The pings and the disconnect are checked
		// below as for a clean exit.
		t.Logf("the guest's rping client lost its teardown race (rdma_get_cm_event after its channel was destroyed); checking the pings")
		guestRC = 0
	}
	if guestRC != 0 || r.hostErr != nil {
		t.Fatalf("guest exit %d, host %v\nguest: %s\nhost: %s", r.guestRC, r.hostErr, r.guestOut, r.hostOut)
	}
	var srv, cli []string
	for _, l := range strings.Split(serverOut, "\n") {
		if s, ok := strings.CutPrefix(l, "server ping data: "); ok {
			srv = append(srv, s)
		}
	}
	for _, l := range strings.Split(clientOut, "\n") {
		if s, ok := strings.CutPrefix(l, "ping data: "); ok {
			cli = append(cli, s)
		}
	}
	if len(srv) != rpingCount || len(cli) != rpingCount {
		t.Fatalf("server printed %d pings, client %d; want %d", len(srv), len(cli), rpingCount)
	}
	for i := range srv {
		if want := fmt.Sprintf("rdma-ping-%d: ", i); srv[i] != cli[i] || !strings.HasPrefix(srv[i], want) || len(srv[i]) != 63 {
			t.Fatalf("ping %d: server %q, client %q", i, srv[i], cli[i])
		}
	}
	if !strings.Contains(serverOut, "server DISCONNECT EVENT") {
		t.Errorf("the server did not report the disconnect")
	}
}
