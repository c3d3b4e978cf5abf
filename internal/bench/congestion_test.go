package bench

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// newCCDev is newDev with congestion control mode cc, its packets dropped
// at the rate drop.
func newCCDev(t testing.TB, addr netip.Addr, cc engine.CCMode, drop float64) *soft.Device {
	t.Helper()
	conn, err := udp.Listen(addr, udp.Options{})
	if err != nil {
		t.Skipf("no UDP socket on %v: %v", addr, err)
	}
	var c packetio.Conn = conn
	if drop > 0 {
		c = fault.New(conn, fault.Options{Seed: 3, Drop: drop})
	}
	dev, err := soft.New(soft.Options{Name: "soft0", Conn: c, Engine: engine.Config{Congestion: cc}})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// TestRunCongestion runs write_bw between two soft devices and checks the
// congestion figures of each side's outcome: the devices' mode, no
// retransmission on a clean path and some, with window cuts, on a lossy
// one (go-back-N: at 2 % loss more than half the packets sent are resent),
// every packet of the run counted, and the first QP's window and round trip
// where the mode keeps one.
func TestRunCongestion(t *testing.T) {
	const iters, size = 300, 4096 // 4 packets a message at MTU 1024
	for _, c := range []struct {
		name string
		cc   engine.CCMode
		drop float64 // of the client's packets
		qps  int
	}{
		{"ecn-default", engine.CCDefault, 0, 1},
		{"ecn-2qp", engine.CCECN, 0, 2},
		{"off", engine.CCOff, 0, 1},
		{"loss-lossy", engine.CCLoss, 0.02, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := newCCDev(t, addrA, c.cc, 0), newCCDev(t, addrB, c.cc, c.drop)
			so, co := pair(t, srv, cli, Options{Test: Test{Verb: Write}, Size: size, Iters: iters, QPs: c.qps, MTU: verbs.MTU1024, Verify: true})
			mode := c.cc
			if mode == engine.CCDefault {
				mode = engine.CCECN
			}
			for _, side := range []struct {
				name string
				cc   *Congestion
				min  uint64 // packets it sent at least
			}{{"client", co.Congestion, iters * uint64(c.qps) * size / 1024}, {"server", so.Congestion, 1}} {
				cc := side.cc
				if cc == nil {
					t.Fatalf("%s: no congestion figures", side.name)
				}
				t.Logf("%s: %+v", side.name, *cc)
				if cc.Mode != mode || cc.Packets < side.min || cc.QPN == 0 {
					t.Errorf("%s: mode %v, %d packets, QP %#x; want %v, at least %d packets, a QP", side.name, cc.Mode, cc.Packets, cc.QPN, mode, side.min)
				}
				if c.drop == 0 && (cc.Retransmits != 0 || cc.Timeouts != 0 || cc.NAKs != 0 || cc.Cuts != 0 || cc.RetransmitPercent() != 0) {
					t.Errorf("%s: a clean path had retransmissions, timeouts, NAKs or cuts: %+v", side.name, *cc)
				}
				if (cc.Window > 0) != (mode != engine.CCOff) || cc.Window > 0 && cc.PathQPs != c.qps {
					t.Errorf("%s: window %d shared by %d QPs under %v with %d QPs", side.name, cc.Window, cc.PathQPs, mode, c.qps)
				}
			}
			if mode != engine.CCOff && co.Congestion.SRTT <= 0 {
				t.Errorf("client: no round trip measured: %+v", *co.Congestion)
			}
			if c.drop > 0 {
				if cc := co.Congestion; cc.Retransmits == 0 || cc.Cuts == 0 || !(cc.RetransmitPercent() > 0 && cc.RetransmitPercent() < 100) {
					t.Errorf("client over a lossy path: %d retransmits (%.2f%%), %d cuts; want some of each", cc.Retransmits, cc.RetransmitPercent(), cc.Cuts)
				}
			}
		})
	}
}

// TestWriteCongestion checks the report's congestion lines: none without
// figures, the counters' line always, the window's only when the first QP
// has one, with its round trips and delay target (or off), alpha only
// under ecn.
func TestWriteCongestion(t *testing.T) {
	counters := func(m engine.CCMode) Congestion {
		return Congestion{Mode: m, Packets: 12800, Retransmits: 64, Timeouts: 1, NAKs: 2, Probes: 3, CNPsSent: 4, CNPsReceived: 5, Cuts: 6, ECNMarked: 7, RxCongestion: 8, QPN: 0x11}
	}
	const line = " retransmits 64 (0.50% of 12800 packets)  timeouts 1  NAKs 2  probes 3  CNPs sent 4 received 5  window cuts 6  ECN-marked 7  rx drops signalled 8\n"
	ecn := counters(engine.CCECN)
	ecn.Window, ecn.SRTT, ecn.MinRTT, ecn.Alpha, ecn.PathQPs, ecn.TargetDelay = 42, 12345*time.Nanosecond, 9870*time.Nanosecond, 0.25, 2, 100*time.Microsecond
	loss := counters(engine.CCLoss)
	loss.Window, loss.SRTT, loss.MinRTT, loss.PathQPs = 10, 2*time.Millisecond, time.Millisecond, 1
	for _, c := range []struct {
		name string
		cc   *Congestion
		want string
	}{
		{"none", nil, ""},
		{"ecn", &ecn, " congestion: ecn " + line + " congestion: QP 0x0011  window 42 packets  SRTT 12.35 usec  min RTT 9.87 usec  delay target 100.00 usec  alpha 0.250  QPs sharing it 2\n"},
		{"loss", &loss, " congestion: loss " + line + " congestion: QP 0x0011  window 10 packets  SRTT 2000.00 usec  min RTT 1000.00 usec  delay target off  QPs sharing it 1\n"},
		{"off", func() *Congestion { c := counters(engine.CCOff); return &c }(), " congestion: off " + line},
		{"no-packets", &Congestion{Mode: engine.CCECN}, " congestion: ecn  retransmits 0 (0.00% of 0 packets)  timeouts 0  NAKs 0  probes 0  CNPs sent 0 received 0  window cuts 0  ECN-marked 0  rx drops signalled 0\n"},
	} {
		var b bytes.Buffer
		WriteCongestion(&b, c.cc)
		if b.String() != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, b.String(), c.want)
		}
	}
}

// TestJSONCongestion: a JSON report carries the congestion figures, the
// mode by name, and none without them.
func TestJSONCongestion(t *testing.T) {
	o := Options{Test: Test{Verb: Write}, Client: true}
	out := &Outcome{MTU: verbs.MTU1024, Results: []Result{{Size: 65536, Iters: 10, BWAvg: 1, BWPeak: 1, MsgRate: 1}},
		Congestion: &Congestion{Mode: engine.CCLoss, Packets: 160, Retransmits: 2, Window: 20, SRTT: time.Microsecond}}
	for _, c := range []struct {
		name string
		cc   *Congestion
		want string
	}{
		{"soft", out.Congestion, `"congestion": {`},
		{"other", nil, ""},
	} {
		out.Congestion = c.cc
		var b bytes.Buffer
		if err := WriteJSON(&b, "soft0", "udp", o, out, nil); err != nil {
			t.Fatal(err)
		}
		var rep JSONReport
		if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
			t.Fatalf("%s: %v:\n%s", c.name, err, b.String())
		}
		if c.cc == nil {
			if rep.Congestion != nil || strings.Contains(b.String(), "congestion") {
				t.Errorf("%s: congestion in the report:\n%s", c.name, b.String())
			}
			continue
		}
		if rep.Congestion == nil || rep.Congestion.Mode != "loss" || rep.Congestion.Packets != 160 || rep.Congestion.Retransmits != 2 || rep.Congestion.Window != 20 || rep.Congestion.SRTT != time.Microsecond {
			t.Errorf("%s: congestion %+v:\n%s", c.name, rep.Congestion, b.String())
		}
		if !strings.Contains(b.String(), `"srtt_ns": 1000`) || !strings.Contains(b.String(), `"mode": "loss"`) {
			t.Errorf("%s: field names:\n%s", c.name, b.String())
		}
	}
}
