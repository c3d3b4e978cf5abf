package rxeinterop

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/capture"
	"github.com/goroce/goroce/wire"
)

// RoCEv2 over IPv6 against rdma_rxe: the guest's fd99::2 is rxe0's GID
// index 2 (after the link-local and IPv4-mapped GIDs), the host side's
// fd99::1 goroce's GID index 2 likewise. The out-of-band exchanges
// (perftest's TCP 18515) stay on IPv4, as with perftest -x 2 between two
// rxe hosts; rdma_cm's go over IPv6.
const (
	hostIP6  = "fd99::1"
	guestIP6 = "fd99::2"
	gidx6    = 2
)

// ipv6Setup gives the harness namespace's bridge its IPv6 address:
// run-peer.sh disables IPv6 in the namespace before it adds fd99::1, which
// then fails.
const ipv6Setup = "sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.br0.disable_ipv6=0 && " +
	"ip -6 addr replace " + hostIP6 + "/64 dev br0 nodad"

// ipv6Host runs a host command line after ipv6Setup.
func ipv6Host(args []string) []string {
	return []string{"sh", "-c", ipv6Setup + " && exec " + shellJoin(args)}
}

// perftest6 is perftestCmd from GID index 2.
func perftest6(c benchCase, server string) string {
	cmd := fmt.Sprintf("ib_%s -d rxe0 -x %d -F -n %d -s %d", c.test, gidx6, benchIters, c.size)
	if server != "" {
		cmd += " " + server
	}
	return cmd
}

// bench6 is benchArgs on fd99::1 from GID index 2.
func (h *harness) bench6(c benchCase, server string) []string {
	a := []string{h.bin, "bench", c.test, "--addr", hostIP6, "-x", strconv.Itoa(gidx6), "--path", "udp",
		"-n", strconv.Itoa(benchIters), "--timeout", "100s", "-s", strconv.Itoa(c.size)}
	if server != "" {
		a = append(a, server)
	}
	return a
}

// TestIPv6Rxe runs ib_write_bw -x 2 and ib_send_lat -x 2 against goroce
// bench -x 2, each side as server and as client, and goroce rping against
// rping -s -a fd99::2, all RoCEv2 over IPv6: both reports (the sides
// agree on the QPs, the GIDs are the IPv6 ones), the pings, and each
// capture (every packet IPv6, every ICRC right, check-pcap.sh).
func TestIPv6Rxe(t *testing.T) {
	h := newHarness(t)
	cases := []benchCase{{"write_bw", 16384, "", 0}, {"send_lat", 64, "", 0}}
	first := cases[0]
	h.startPeer("v6-bench-"+first.name()+"-rxe-server", perftest6(first, ""), shellJoin(ipv6Host(h.bench6(first, guestIP))))
	for _, c := range cases {
		t.Run(c.name()+"/rxe-server", func(t *testing.T) {
			var r result
			if c == first {
				r = h.peerResult(t)
			} else {
				r = h.pair(t, "v6-bench-"+c.name()+"-rxe-server", perftest6(c, ""), ipv6Host(h.bench6(c, guestIP)), false)
			}
			checkIPv6Bench(t, h, r, c, false)
		})
		t.Run(c.name()+"/goroce-server", func(t *testing.T) {
			r := h.pair(t, "v6-bench-"+c.name()+"-goroce-server", perftest6(c, hostIP), ipv6Host(h.bench6(c, "")), true)
			checkIPv6Bench(t, h, r, c, true)
		})
	}
	t.Run("rping/rxe-server", func(t *testing.T) {
		client := []string{h.bin, "rping", "-c", "-a", guestIP6, "--addr", hostIP6, "--path", "udp", "-C", fmt.Sprint(rpingCount), "-v", "-V", "--timeout", "60s"}
		r := h.pair(t, "v6-rping-rxe-server", fmt.Sprintf("rping -s -a %s -v -V", guestIP6), ipv6Host(client), false)
		checkRping(t, r, r.guestOut, r.hostOut)
		h.checkCapture(t, r.pcap)
		checkIPv6Capture(t, h, r.pcap)
	})
	// A Linux rping client over IPv6 towards goroce's server: TestIPv6RpingRxe.
}

// checkIPv6Bench is checkBench, and both reports' GIDs the IPv6 ones (fd99
// is 253:153 as perftest prints it).
func checkIPv6Bench(t *testing.T, h *harness, r result, c benchCase, goroceServer bool) {
	t.Helper()
	h.checkBench(t, r, c, goroceServer)
	for _, x := range []struct{ name, out string }{{"perftest", r.guestOut}, {"goroce", r.hostOut}} {
		if n := strings.Count(x.out, " GID: 253:153:"); n != 2 {
			t.Errorf("%s's report shows %d fd99:: GIDs, want 2 (local and remote)", x.name, n)
		}
	}
	checkIPv6Capture(t, h, r.pcap)
}

// checkIPv6Capture requires the capture's RoCEv2 packets to be all IPv6.
func checkIPv6Capture(t *testing.T, h *harness, pcap string) {
	t.Helper()
	v4, v6, err := roceFamilies(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if v6 == 0 || v4 != 0 {
		t.Errorf("%s: %d RoCEv2 packets over IPv6 and %d over IPv4; want all over IPv6", pcap, v6, v4)
	}
	t.Logf("%s: %d RoCEv2 packets, all over IPv6", pcap, v6)
}

// roceFamilies counts the capture's RoCEv2 packets (UDP to 4791) over IPv4
// and over IPv6.
func roceFamilies(pcap string) (v4, v6 int, err error) {
	f, err := os.Open(pcap)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	rd, err := capture.NewReader(f)
	if err != nil {
		return 0, 0, err
	}
	var rec capture.Record
	for {
		if err := rd.Next(&rec); err == io.EOF {
			return v4, v6, nil
		} else if err != nil {
			return v4, v6, fmt.Errorf("reading %s: %w", pcap, err)
		}
		if rec.LinkType != capture.LinkEthernet {
			continue
		}
		var fr wire.Frame
		if wire.ParseFrame(rec.Data, &fr) != nil || fr.L4 == 0 || fr.UDP().DstPort() != wire.RoCEv2Port {
			continue
		}
		if fr.IPVersion == 6 {
			v6++
		} else {
			v4++
		}
	}
}
