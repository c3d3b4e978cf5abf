package engine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// writeFrames wraps captured datagrams in the Ethernet/IPv4/UDP headers
// Linux gives them on an unconnected socket with IP_PMTUDISC_DO (DF set,
// Identification 0) and writes a pcap.
func writeFrames(t *testing.T, path string, pkts []captured) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range pkts {
		fl := wire.Flow{SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, DstMAC: wire.MAC{2, 0, 0, 0, 0, 2}, Src: c.src, Dst: c.dst, SrcPort: wire.RoCEv2Port}
		frame := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
		frame, err = fl.PseudoHeader(frame, len(c.pkt))
		if err != nil {
			t.Fatal(err)
		}
		frame = append(frame, c.pkt...)
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(frame), Length: len(frame)}
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEngineWireCheck has the independent checker judge every packet the
// engine sent in a mixed workload with loss, at path MTU 1024 and 4096.
func TestEngineWireCheck(t *testing.T) {
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		testenv.Skip(t, testenv.WireCheck, "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) not set")
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		testenv.Skip(t, testenv.WireCheck, "tshark not installed")
	}
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		l := newLink(t)
		l.capture = []captured{}
		n := 0
		l.drop = func(int) bool { n++; return n%17 == 0 }
		a, b := newSide(t, l.a, verbs.QPTRC, 1<<20), newSide(t, l.b, verbs.QPTRC, 1<<20)
		connectRC(t, a, b, mtu)
		fill(a.buf, 1)
		_, err := b.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.sge(0, 20000)}, {WRID: 2, SGList: b.sge(0, 10)}})
		must(t, err)
		_, err = a.qp.PostSend([]verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRSend, SGList: a.sge(0, 9999)},
			{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: a.sge(0, 12345), RemoteAddr: b.mr.Addr() + 65536, RKey: b.mr.RKey()},
			{WRID: 3, Opcode: verbs.WRRDMARead, SGList: a.sge(100000, 9000), RemoteAddr: b.mr.Addr() + 65536, RKey: b.mr.RKey()},
			{WRID: 4, Opcode: verbs.WRAtomicCmpAndSwp, SGList: a.sge(200000, 8), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), CompareAdd: 0, Swap: 1},
			{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, SGList: a.sge(200008, 8), RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), CompareAdd: 1},
			{WRID: 6, Opcode: verbs.WRRDMAWriteWithImm, Imm: 7, Flags: verbs.SendSignaled, SGList: a.sge(0, 3), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		})
		must(t, err)
		collect(l, t, a.scq, 1)
		path := filepath.Join(t.TempDir(), "engine.pcap")
		writeFrames(t, path, l.capture)
		out, err := testenv.WireCheckCommand(t, checker, "--pmtu", mtu.String(), path).CombinedOutput()
		last := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		if err != nil || !strings.HasSuffix(last, " 0 failed") {
			t.Fatalf("mtu %d: %v: %s\n%s", mtu.Bytes(), err, last, out)
		}
		t.Logf("mtu %d: %s (%d packets, %d dropped on purpose)", mtu.Bytes(), last, len(l.capture), len(l.capture)/17)
	}
}
