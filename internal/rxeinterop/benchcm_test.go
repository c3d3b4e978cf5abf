package rxeinterop

import (
	"flag"
	"fmt"
	"regexp"
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

// rxeLong enables the interop tests too long for every run.
var rxeLong = flag.Bool("rxe.long", false, "run the long rdma_rxe interop tests (TestBenchCMRxeLoss)")

// TestBenchCMRxeLoss runs ib_write_bw -R -q 4 against goroce bench -R,
// each side as server, with nftables in the host's namespace dropping
// every other CM MAD both ways (TestRpingRxe drops one in three; DREQs coming
// in are spared, since perftest's server destroys its ids right after
// rdma_disconnect, which cancels the DREQ's resends): the REQs, REPs and
// RTUs of the control and the four data connections are resent until they
// pass, and the test runs and ends on both sides.
//
// Under emulation it takes about four minutes (Linux resends a lost REQ
// after 6.4 s), so it runs only with -rxe.long (go test ./internal/rxeinterop
// -run BenchCMRxeLoss -args -rxe.long); TestRpingRxe's loss runs cover CM
// loss in every run.
func TestBenchCMRxeLoss(t *testing.T) {
	if !*rxeLong {
		t.Skip("about four minutes under emulation: run with -args -rxe.long")
	}
	h := newHarness(t)
	c := cmBenchCase{"write_bw", 16384, 4}
	bc := benchCase{test: c.test, size: c.size, qps: c.qps}
	wrap := func(host []string) string {
		return nftDropCM + "; " + shellJoin(host) + "; rc=$?; " + nftReport + "; exit $rc"
	}
	h.startPeer("benchcm-loss-rxe-server", c.perftestCmd(""), wrap(c.benchArgs(h, guestIP)))
	t.Run("rxe-server", func(t *testing.T) {
		r := h.peerResult(t)
		h.checkBench(t, r, bc, false)
		logDropped(t, r.hostOut)
	})
	t.Run("goroce-server", func(t *testing.T) {
		r := h.pair(t, "benchcm-loss-goroce-server", c.perftestCmd(hostIP), []string{"sh", "-c", wrap(c.benchArgs(h, ""))}, true)
		h.checkBench(t, r, bc, true)
		logDropped(t, r.hostOut)
	})
}

// logDropped logs the nftables counters a loss run printed, and fails the
// test when there are none.
func logDropped(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(out, -1)
	dropped := 0
	for _, x := range m {
		n, _ := strconv.Atoi(x[1])
		dropped += n
	}
	t.Logf("nftables dropped %d CM MADs", dropped)
	if len(m) != 2 {
		t.Errorf("no nftables counters in the host's output")
	}
}
