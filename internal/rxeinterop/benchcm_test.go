package rxeinterop

import (
	"fmt"
	"strconv"
	"testing"
)

// cmBenchCase is one perftest -R run: the program, its message size and QPs.
type cmBenchCase struct {
	test string
	size int
	qps  int
}

var cmBenchCases = []cmBenchCase{
	{"write_bw", 16384, 1},
	{"write_bw", 16384, 4},
	{"send_bw", 4096, 1},
	{"send_bw", 4096, 4},
}

func (c cmBenchCase) name() string { return fmt.Sprintf("%s-q%d", c.test, c.qps) }

// perftestCmd is the guest's perftest -R command line; a client when server
// is set. No -x: rdma_cm picks the GID of the address.
func (c cmBenchCase) perftestCmd(server string) string {
	cmd := fmt.Sprintf("ib_%s -d rxe0 -R -F -n %d -s %d -q %d", c.test, benchIters, c.size, c.qps)
	if server != "" {
		cmd += " " + server
	}
	return cmd
}

// benchArgs is goroce bench -R's command line; a client when server is set.
func (c cmBenchCase) benchArgs(h *harness, server string) []string {
	a := []string{h.bin, "bench", c.test, "-R", "--addr", hostIP, "--path", "udp", "-n", strconv.Itoa(benchIters),
		"-s", strconv.Itoa(c.size), "-q", strconv.Itoa(c.qps), "--timeout", "100s"}
	if server != "" {
		a = append(a, server)
	}
	return a
}

// TestBenchCMRxe runs goroce bench -R against perftest 4.5's -R (ib_write_bw
// and ib_send_bw, 1 and 4 QPs) on rdma_rxe, each as server and as client:
// the exchange over an rdma_cm RC connection with binary keys, one rdma_cm
// connection per data QP, the disconnects at the end. Both reports are
// checked as TestBenchRxe checks them, and the captures.
func TestBenchCMRxe(t *testing.T) {
	h := newHarness(t)
	first := cmBenchCases[0]
	h.startPeer("benchcm-"+first.name()+"-rxe-server", first.perftestCmd(""), shellJoin(first.benchArgs(h, guestIP)))
	for _, c := range cmBenchCases {
		bc := benchCase{test: c.test, size: c.size, qps: c.qps}
		t.Run(c.name()+"/rxe-server", func(t *testing.T) {
			var r result
			if c == first {
				r = h.peerResult(t)
			} else {
				r = h.pair(t, "benchcm-"+c.name()+"-rxe-server", c.perftestCmd(""), c.benchArgs(h, guestIP), false)
			}
			h.checkBench(t, r, bc, false)
		})
		t.Run(c.name()+"/goroce-server", func(t *testing.T) {
			r := h.pair(t, "benchcm-"+c.name()+"-goroce-server", c.perftestCmd(hostIP), c.benchArgs(h, ""), true)
			h.checkBench(t, r, bc, true)
		})
	}
}
