package rxeinterop

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// rpingIbverbs runs, in TestIbverbsRxe's guest, goroce rping on the
// ibverbs provider (rxe0: rdma_cm through librdmacm and the guest kernel's
// rdma_cm; g is its command line) against Linux rping in the guest, each
// as server and as client, and against goroce rping on the soft provider
// on this machine's side, each as server and as client: 50 pings of RDMA
// READ, SEND and RDMA WRITE each, verified by the client (-V), and the
// disconnect.
func rpingIbverbs(t *testing.T, h *harness, g string) {
	ping := fmt.Sprintf("-C %d -v -V", rpingCount)
	// Server and client both in the guest: the client waits for the
	// server's listener (goroce -d says "listening on"; for Linux rping,
	// which says nothing, the rdma tool shows its listening rdma_cm id).
	inGuest := func(t *testing.T, label, server, client string) {
		// The server's stdout and stderr go to files of their own: in one,
		// a line on unbuffered stderr lands inside buffered stdout's.
		f := "/tmp/" + label
		script := fmt.Sprintf("%s >%s.out 2>%s.err & s=$!; i=0; while [ $i -lt 100 ] && ! grep -q 'listening on' %s.err && ! rdma resource show cm_id 2>/dev/null | grep -q 'LISTEN.*:7174 '; do sleep 0.1; i=$((i+1)); done; "+
			"%s; rc=$?; wait $s; src=$?; cat %s.out %s.err; echo server-rc=$src; [ $rc = 0 ] && [ $src = 0 ]", server, f, f, f, client, f, f)
		h.guestJob(t, label, 110, script)
		out, rc := h.waitJob(t, label, 140*time.Second)
		checkRping(t, result{guestCmd: script, guestOut: out, guestRC: rc}, out, out)
	}
	t.Run("linux-server", func(t *testing.T) {
		inGuest(t, "rping-ibv-linux-server", fmt.Sprintf("rping -s -a %s -v", guestIP), fmt.Sprintf("%s -c -a %s %s", g, guestIP, ping))
	})
	t.Run("goroce-ibverbs-server", func(t *testing.T) {
		inGuest(t, "rping-ibv-goroce-server", fmt.Sprintf("%s -s -a %s -v -d", g, guestIP), fmt.Sprintf("rping -c -a %s %s", guestIP, ping))
	})
	t.Run("soft-client", func(t *testing.T) {
		label := "rping-ibv-soft-client"
		h.guestJob(t, label, 110, fmt.Sprintf("%s -s -a %s -v -d", g, guestIP))
		// The guest's server says "listening on" once rdma_listen returned
		// (an rdma_cm server opens no TCP port to wait for; a fixed sleep
		// lost the race under CI's load and the dial got REJ 8).
		h.waitJobSays(t, label, "listening on", 60*time.Second)
		client := []string{h.bin, "rping", "-c", "-a", guestIP, "--addr", hostIP, "--path", "udp", "-v", "-V",
			"-C", fmt.Sprint(rpingCount), "--timeout", "60s"}
		host := exec.Command("ip", append([]string{"netns", "exec", h.ns}, client...)...)
		hostOut := &testenv.Buffer{}
		host.Stdout, host.Stderr = hostOut, hostOut
		hostErr := host.Run()
		out, rc := h.waitJob(t, label, 140*time.Second)
		checkRping(t, result{guestCmd: g + " -s", hostCmd: strings.Join(client, " "), guestOut: out, guestRC: rc,
			hostOut: hostOut.String(), hostErr: hostErr}, out, hostOut.String())
	})
	t.Run("soft-server", func(t *testing.T) {
		server := []string{h.bin, "rping", "-s", "-a", hostIP, "--path", "udp", "-v", "-d", "--timeout", "60s"}
		r := h.pair(t, "rping-ibv-soft-server", fmt.Sprintf("%s -c -a %s %s", g, hostIP, ping), server, true)
		checkRping(t, r, r.hostOut, r.guestOut)
	})
}
