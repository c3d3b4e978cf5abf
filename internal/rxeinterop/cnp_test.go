package rxeinterop

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/capture"
	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/provider/soft"
)

// cnpIters and cnpSize are each ECN run's ib_send_bw iterations and message
// size: 4 packets a message at rxe's path MTU of 1024, 20,000 packets from
// the sender.
const (
	cnpIters = 5000
	cnpSize  = 4096
)

// cnpSideEnv carries a cnpSide to TestCNPGoroceSide, the goroce side of
// TestCNPRxe, run in the harness's namespace as a process of its own.
const cnpSideEnv = "GOROCE_CNP_SIDE"

// cnpSide is what the goroce side of a TestCNPRxe run does.
type cnpSide struct {
	Test   string // perftest's test name: send_bw
	Size   int
	Iters  int
	Server string // the guest's address when goroce is the client; "" makes it the server
}

// statsPrefix starts the line on which TestCNPGoroceSide prints its soft
// device's engine.Stats (JSON) once the test is over.
const statsPrefix = "goroce-stats: "

// nftCE is the nftables table that sets the IP ECN field of every RoCEv2
// packet that comes from the guest to goroce's address to CE (11), at
// prerouting, before the socket's IP_RECVTOS reads it. rdma_rxe sends its
// packets Not-ECT (00): a switch would not mark those, it would drop them
// instead, but the mark makes goroce's notification point answer rxe's
// traffic with CNPs, which is what this test is after.
var nftCE = `nft add table ip goroce_ce && ` +
	`nft add chain ip goroce_ce pre '{ type filter hook prerouting priority mangle; }' && ` +
	`nft add rule ip goroce_ce pre ip saddr ` + guestIP + ` ip daddr ` + hostIP + ` udp dport 4791 counter ip ecn set ce`

// nftCECounter matches the rule's counter in `nft list table ip goroce_ce`.
var nftCECounter = regexp.MustCompile(`counter packets (\d+) bytes \d+`)

// TestCNPRxe runs ib_send_bw between rdma_rxe in the guest and goroce's soft
// device (engine.CCECN) on this machine's side of the bridge, cnpIters 4 KiB
// messages each way round, with and without an nftables rule in the
// harness's namespace that marks rxe's RoCEv2 packets CE on their way in:
//
//   - with the mark, goroce's QP counts the CE-marked packets (ECNMarked) and
//     answers them with CNPs (CNPsSent: BTH opcode 0x81 to rxe's QP, BECN,
//     PSN 0, 16 zero bytes, a right ICRC, as the capture shows), which rdma_rxe
//     (Linux 6.1, no DCQCN) must take without harm to the connection: both
//     reports whole, no error completion, no retry exceeded; rxe's
//     hw_counters before and after are logged to show what it made of them;
//   - without, rxe's Not-ECT packets are plain traffic to goroce: nothing
//     counted as CE-marked, no CNP.
//
// goroce is the server of two runs (rxe's SENDs are CE-marked) and the
// client of the other two (rxe's ACKs are). The goroce side is this test
// binary itself (TestCNPGoroceSide) in the namespace, so that it can print its
// device's counters, which goroce bench does not.
func TestCNPRxe(t *testing.T) {
	h := newHarness(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Skipf(t, testenv.Nftables, "TestCNPRxe marks rdma_rxe's packets CE with nft: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.startPeer("cnp-boot", "true", "true")
	for _, c := range []struct {
		name         string
		ce           bool
		goroceServer bool
	}{
		{"ce/goroce-server", true, true},
		{"plain/goroce-server", false, true},
		{"ce/goroce-client", true, false},
		{"plain/goroce-client", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			label := "cnp-" + strings.ReplaceAll(c.name, "/", "-")
			side := cnpSide{Test: "send_bw", Size: cnpSize, Iters: cnpIters}
			gcmd := fmt.Sprintf("ib_send_bw -d rxe0 -x %d -F -n %d -s %d", h.gidx, cnpIters, cnpSize)
			if c.goroceServer {
				gcmd += " " + hostIP
			} else {
				side.Server = guestIP
			}
			spec, err := json.Marshal(side)
			if err != nil {
				t.Fatal(err)
			}
			host := []string{"env", cnpSideEnv + "=" + string(spec), self, "-test.run=^TestCNPGoroceSide$", "-test.timeout=3m"}

			if c.ce {
				if out, err := h.nsShell(nftCE); err != nil {
					t.Fatalf("nft: %v\n%s", err, out)
				}
				t.Cleanup(func() { h.nsShell("nft delete table ip goroce_ce") })
			}
			before := h.rxeCounters(t, label+"-ctr0")
			r := h.pair(t, label, gcmd, host, c.goroceServer)
			after := h.rxeCounters(t, label+"-ctr1")
			marked := int64(-1)
			if c.ce {
				out, _ := h.nsShell("nft list table ip goroce_ce")
				if m := nftCECounter.FindStringSubmatch(out); m != nil {
					marked, _ = strconv.ParseInt(m[1], 10, 64)
				}
				t.Logf("nftables marked %d RoCEv2 packets from the guest CE:\n%s", marked, out)
				if marked <= 0 {
					t.Errorf("the nft rule marked no packet:\n%s", out)
				}
			}
			h.checkCNPRun(t, r, c.ce, c.goroceServer, marked, before, after)
		})
	}
}

// nsShell runs a shell command in the harness's namespace.
func (h *harness) nsShell(cmd string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", h.ns, "sh", "-c", cmd).CombinedOutput()
	return string(out), err
}

// rxeCounters reads rxe0's port counters (hw_counters) in the guest, as a
// guest job named name; nil if the guest has none.
func (h *harness) rxeCounters(t *testing.T, name string) map[string]int64 {
	h.guestJob(t, name, 20, `cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do echo "$f $(cat $f)"; done`)
	out, rc := h.waitJob(t, name, 40*time.Second)
	if rc != 0 {
		t.Logf("rxe0's hw_counters: exit %d: %s", rc, out)
		return nil
	}
	m := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// checkCNPRun judges one TestCNPRxe run: both sides' exit statuses and
// reports, goroce's counters, rxe's, and the capture.
func (h *harness) checkCNPRun(t *testing.T, r result, ce, goroceServer bool, marked int64, before, after map[string]int64) {
	t.Logf("guest (rc=%d): %s\n%s", r.guestRC, r.guestCmd, r.guestOut)
	t.Logf("host (%v): %s\n%s", r.hostErr, r.hostCmd, r.hostOut)
	if r.guestRC != 0 || r.hostErr != nil {
		t.Errorf("guest exit %d, host %v", r.guestRC, r.hostErr)
	}
	for _, bad := range []string{"Completion with error", "Failed status", "retry counter exceeded"} {
		if strings.Contains(strings.ToLower(r.guestOut), strings.ToLower(bad)) {
			t.Errorf("perftest's output says %q", bad)
		}
	}

	// Both reports whole: the same QPs seen from both ends, every message.
	g, gerr := parsePerf(r.guestOut)
	o, oerr := parsePerf(r.hostOut)
	if gerr != nil || oerr != nil {
		t.Fatalf("reports: perftest: %v; goroce: %v", gerr, oerr)
	}
	if g.local != o.remote || o.local != g.remote {
		t.Errorf("the sides disagree on the addresses:\nperftest local  %s\ngoroce remote   %s\ngoroce local    %s\nperftest remote %s", g.local, o.remote, o.local, g.remote)
	}
	for _, x := range []struct {
		name string
		p    perfReport
	}{{"perftest", g}, {"goroce", o}} {
		if len(x.p.rows) != 1 || len(x.p.rows[0]) != 5 || x.p.rows[0][0] != strconv.Itoa(cnpSize) || x.p.rows[0][1] != strconv.Itoa(cnpIters) {
			t.Errorf("%s: rows %q, want one of %d bytes and %d iterations", x.name, x.p.rows, cnpSize, cnpIters)
		}
	}
	rxeQPN, err := qpnOf(g.local)
	if err != nil {
		t.Fatalf("perftest's local address: %v", err)
	}

	// goroce's counters.
	m := regexp.MustCompile(`(?m)^` + statsPrefix + `(\{.*\})$`).FindStringSubmatch(r.hostOut)
	if m == nil {
		t.Fatalf("the goroce side printed no counters")
	}
	var st engine.Stats
	if err := json.Unmarshal([]byte(m[1]), &st); err != nil {
		t.Fatalf("goroce's counters: %v", err)
	}
	t.Logf("goroce: RxPackets %d TxPackets %d ECNMarked %d CNPsSent %d CNPsReceived %d CongestionCuts %d RxCongestion %d Retransmits %d Timeouts %d Duplicates %d OutOfSequence %d NAKsSent %d NAKsReceived %d RNRSent %d RNRReceived %d",
		st.RxPackets, st.TxPackets, st.ECNMarked, st.CNPsSent, st.CNPsReceived, st.CongestionCuts, st.RxCongestion,
		st.Retransmits, st.Timeouts, st.Duplicates, st.OutOfSequence, st.NAKsSent, st.NAKsReceived, st.RNRSent, st.RNRReceived)
	if st.CNPsReceived != 0 {
		t.Errorf("goroce received %d CNPs: rdma_rxe sends none", st.CNPsReceived)
	}
	if st.ICRCDrops+st.MalformedDrops+st.UnknownQPDrops+st.WrongPeerDrops+st.CQOverruns+st.TxBuildErrors != 0 {
		t.Errorf("goroce dropped or failed: %+v", st)
	}
	if ce {
		if st.ECNMarked == 0 || st.CNPsSent == 0 {
			t.Errorf("with rxe's packets marked CE goroce counted ECNMarked %d, CNPsSent %d; want both > 0", st.ECNMarked, st.CNPsSent)
		}
		if marked >= 0 && int64(st.ECNMarked) > marked {
			t.Errorf("goroce counted %d CE-marked packets, nftables marked %d", st.ECNMarked, marked)
		}
		if st.CNPsSent > st.ECNMarked && st.RxCongestion == 0 {
			t.Errorf("%d CNPs sent for %d CE-marked packets", st.CNPsSent, st.ECNMarked)
		}
	} else {
		if st.ECNMarked != 0 {
			t.Errorf("rxe's packets are Not-ECT, yet goroce counted %d CE-marked", st.ECNMarked)
		}
		if st.CNPsSent != 0 {
			if st.RxCongestion == 0 {
				t.Errorf("goroce sent %d CNPs with nothing CE-marked and no receive drops", st.CNPsSent)
			} else {
				t.Logf("goroce sent %d CNPs for its packet path's receive drops (RxCongestion %d), not for ECN", st.CNPsSent, st.RxCongestion)
			}
		}
	}
	if st.CongestionCuts != 0 {
		t.Logf("goroce cut its window %d times (losses or timeouts: rxe sends no CNPs)", st.CongestionCuts)
	}

	// rxe's counters: what it made of the CNPs.
	cc := h.scanCNPCapture(t, r.pcap, rxeQPN)
	if before == nil || after == nil {
		t.Logf("rxe0 shows no hw_counters")
	} else {
		var names []string
		for k := range after {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, k := range names {
			fmt.Fprintf(&b, " %s %d", k, after[k]-before[k])
		}
		t.Logf("rxe0 hw_counters during the run:%s", b.String())
		for _, k := range []string{"retry_exceeded_err", "retry_rnr_exceeded_err"} {
			if d := after[k] - before[k]; d != 0 {
				t.Errorf("rxe's %s went up by %d", k, d)
			}
		}
		if rcvd, ok := after["rcvd_pkts"]; ok {
			d := rcvd - before["rcvd_pkts"]
			switch {
			case cc.cnps > 0 && d == cc.toGuest-cc.cnps:
				t.Logf("rxe counted %d packets received: exactly goroce's %d non-CNP packets, none of its %d CNPs (rdma_rxe drops opcode 0x81 in its header check, before it counts a packet)", d, cc.toGuest-cc.cnps, cc.cnps)
			case cc.cnps > 0 && d == cc.toGuest:
				t.Logf("rxe counted %d packets received: goroce's %d packets, CNPs included", d, cc.toGuest)
			default:
				t.Logf("rxe counted %d packets received; the capture has %d from goroce, %d of them CNPs", d, cc.toGuest, cc.cnps)
			}
		}
	}

	if ce {
		if cc.cnps == 0 {
			t.Errorf("no CNP from goroce in the capture")
		}
		if uint64(cc.cnps) > st.CNPsSent {
			t.Errorf("the capture has %d CNPs, goroce counted %d sent", cc.cnps, st.CNPsSent)
		}
	} else if cc.cnps != 0 && st.RxCongestion == 0 {
		t.Errorf("the capture has %d CNPs in a run without CE marks", cc.cnps)
	}
	if cc.fromGuestECN[0] != cc.fromGuest && !ce {
		t.Errorf("rxe's packets' ECN fields (count by value 0..3): %v; want all Not-ECT", cc.fromGuestECN)
	}
	// goroce decode over the whole capture (every packet well formed, every
	// ICRC right); check-pcap.sh, a few milliseconds a packet, over the
	// CNPs alone.
	h.checkCaptureWire(t, r.pcap, false)
	if cc.cnps > 0 {
		h.wireCheckCNPs(t, r.pcap, cc.cnps)
	}
}

// qpnOf reads the QPN of a perftest address line.
func qpnOf(addr string) (uint32, error) {
	m := regexp.MustCompile(`QPN 0x([0-9a-f]+)`).FindStringSubmatch(addr)
	if m == nil {
		return 0, fmt.Errorf("no QPN in %q", addr)
	}
	n, err := strconv.ParseUint(m[1], 16, 32)
	return uint32(n), err
}

// cnpCapture is what scanCNPCapture found.
type cnpCapture struct {
	fromGuest, toGuest int64         // RoCEv2 packets each way
	fromGuestECN       [4]int64      // rxe's packets by IP ECN field, as captured on br0 (before prerouting)
	toGuestECN         [4]int64      // goroce's
	cnps               int64         // CNPs from goroce
	minGap             time.Duration // the least time between two CNPs, as captured
	closeGaps          int64         // CNPs captured less than engine.DefaultCNPInterval after the one before
}

// scanCNPCapture counts the RoCEv2 packets of pcap each way and their ECN
// fields, and checks every CNP goroce sent: to rxe's QP rxeQPN, BECN set,
// FECN, SE, M, pad, TVer and AckReq clear, PSN 0, 16 zero bytes and the ICRC
// (32 bytes of UDP payload).
func (h *harness) scanCNPCapture(t *testing.T, pcap string, rxeQPN uint32) cnpCapture {
	var c cnpCapture
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	host, guest := netip.MustParseAddr(hostIP).As4(), netip.MustParseAddr(guestIP).As4()
	var last time.Time
	bad := 0
	var rec capture.Record
	for {
		if err := rd.Next(&rec); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("reading %s: %v", pcap, err)
		}
		d := rec.Data
		if rec.LinkType != capture.LinkEthernet || len(d) < 14+20+8 || binary.BigEndian.Uint16(d[12:]) != 0x0800 {
			continue
		}
		ip := d[14:]
		ihl := int(ip[0]&15) * 4
		if ip[9] != 17 || len(ip) < ihl+8 || binary.BigEndian.Uint16(ip[ihl+2:]) != 4791 {
			continue
		}
		ecn := ip[1] & 3
		bth := ip[ihl+8:]
		switch src, dst := [4]byte(ip[12:16]), [4]byte(ip[16:20]); {
		case src == guest && dst == host:
			c.fromGuest++
			c.fromGuestECN[ecn]++
			continue
		case src == host && dst == guest:
			c.toGuest++
			c.toGuestECN[ecn]++
		default:
			continue
		}
		if len(bth) < 1 || bth[0] != 0x81 {
			continue
		}
		c.cnps++
		if gap := rec.Time.Sub(last); !last.IsZero() {
			if c.minGap == 0 || gap < c.minGap {
				c.minGap = gap
			}
			if gap < engine.DefaultCNPInterval*time.Nanosecond {
				c.closeGaps++
			}
		}
		last = rec.Time
		why := ""
		switch {
		case len(bth) != 32:
			why = fmt.Sprintf("%d bytes of UDP payload, want 32", len(bth))
		case bth[1] != 0:
			why = fmt.Sprintf("SE/M/pad/TVer byte 0x%02x", bth[1])
		case bth[4] != 0x40:
			why = fmt.Sprintf("FECN/BECN byte 0x%02x, want BECN alone (0x40)", bth[4])
		case uint32(bth[5])<<16|uint32(bth[6])<<8|uint32(bth[7]) != rxeQPN:
			why = fmt.Sprintf("DestQP 0x%06x, want rxe's QP 0x%06x", uint32(bth[5])<<16|uint32(bth[6])<<8|uint32(bth[7]), rxeQPN)
		case bth[8] != 0 || bth[9] != 0 || bth[10] != 0 || bth[11] != 0:
			why = fmt.Sprintf("AckReq/PSN bytes % x, want zero", bth[8:12])
		case strings.Count(string(bth[12:28]), "\x00") != 16:
			why = fmt.Sprintf("reserved bytes % x, want zero", bth[12:28])
		}
		if why != "" {
			if bad++; bad <= 5 {
				t.Errorf("CNP in frame %d: %s", rec.Index, why)
			}
		}
	}
	t.Logf("capture %s: %d RoCEv2 packets from rxe (ECN Not-ECT/ECT(1)/ECT(0)/CE: %v), %d from goroce (%v), %d of them CNPs (all to rxe's QP 0x%06x, BECN, PSN 0: %v; least gap between two %v, %d closer than the engine's %v, as captured)",
		filepath.Base(pcap), c.fromGuest, c.fromGuestECN, c.toGuest, c.toGuestECN, c.cnps, rxeQPN, bad == 0, c.minGap, c.closeGaps, engine.DefaultCNPInterval*time.Nanosecond)
	return c
}

// wireCheckCNPs has check-pcap.sh judge the CNPs of pcap (the first 1,000):
// tshark's InfiniBand dissector and two independent ICRCs, and that it sees
// each as a CNP.
func (h *harness) wireCheckCNPs(t *testing.T, pcap string, n int64) {
	sub := strings.TrimSuffix(pcap, ".pcap") + "-cnps.pcap"
	out, err := exec.Command("tcpdump", "-r", pcap, "-w", sub, "-c", "1000",
		"ip src "+hostIP+" and udp dst port 4791 and udp[8] = 0x81").CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, out)
	}
	if h.wcheck == "" {
		t.Log("CNPs not checked by check-pcap.sh (GOROCE_WIRE_CHECK not set)")
		keepCapture(t, sub)
		return
	}
	h.checkCaptureWire(t, sub, true)
	b, err := os.ReadFile(sub + ".json")
	if err != nil {
		t.Fatalf("check-pcap.sh's JSON: %v", err)
	}
	var res []struct {
		OK     bool   `json:"ok"`
		Opname string `json:"opname"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("check-pcap.sh's JSON: %v", err)
	}
	cnps := 0
	for _, r := range res {
		if r.Opname == "CNP" {
			cnps++
		}
	}
	if want := min(n, 1000); int64(cnps) != want || int64(len(res)) != want {
		t.Errorf("check-pcap.sh judged %d packets, %d of them CNPs; want %d CNPs", len(res), cnps, want)
	} else {
		t.Logf("check-pcap.sh judged %d CNPs of goroce's", cnps)
	}
}

// TestCNPGoroceSide is the goroce side of a TestCNPRxe run, which runs this
// test binary in the harness's namespace with cnpSideEnv set: one
// goroce bench run (bench.RunSide) on a soft device with ECN congestion
// control at hostIP over the UDP path, its report, then its device's
// counters on a line of their own (statsPrefix). Without cnpSideEnv it
// skips.
func TestCNPGoroceSide(t *testing.T) {
	spec := os.Getenv(cnpSideEnv)
	if spec == "" {
		t.Skip("the goroce side of TestCNPRxe, which runs it in the rxe-vm harness's namespace")
	}
	var side cnpSide
	if err := json.Unmarshal([]byte(spec), &side); err != nil {
		t.Fatalf("%s: %v", cnpSideEnv, err)
	}
	test, err := bench.ParseTest(side.Test)
	if err != nil {
		t.Fatal(err)
	}
	dev, _, err := soft.Open(soft.OpenOptions{Addr: hostIP, Path: "udp", Congestion: engine.CCECN})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	o := bench.Options{Test: test, Size: side.Size, Iters: side.Iters, Progress: os.Stderr}
	err = bench.RunSide(ctx, dev, o, bench.Side{Host: side.Server, Port: perftest.Port, Out: os.Stdout, Log: os.Stderr})
	st, jerr := json.Marshal(dev.Stats())
	if jerr != nil {
		t.Fatal(jerr)
	}
	fmt.Printf("\n%s%s\n", statsPrefix, st)
	if err != nil {
		t.Fatal(err)
	}
}
