package wire

import (
	"encoding/binary"
	"github.com/goroce/goroce/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sampleFrames builds one frame for every defined opcode but RD's (and every
// AETH syndrome kind on ACKNOWLEDGE), over IPv4 and IPv6, at path MTU 1024.
// RD is left out: RoCE does not use it, and Wireshark's dissector lays out
// RD headers differently from IBA 9.3 and rxe_opcode.c (it drops the RDETH
// or DETH on several RD opcodes), so tshark cannot judge them.
func sampleFrames(t testing.TB) [][]byte {
	const pmtu = 1024
	var frames [][]byte
	for _, v6 := range []bool{false, true} {
		fl := Flow{SrcMAC: MAC{2, 0, 0, 0, 0, 1}, DstMAC: MAC{2, 0, 0, 0, 0, 2},
			Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: SourcePort(0, 0x11, 0x12)}
		if v6 {
			fl.Src, fl.Dst, fl.FlowLabel = addr6(1), addr6(2), FlowLabel(0x11, 0x12)
		}
		psn := PSN(0xFFFFF0) // crosses the 24-bit wrap
		add := func(h Header, n int) {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*7 + 3)
			}
			h.PKey, h.DestQP, h.PSN = DefaultPKey, 0x12, psn
			psn = psn.Add(1)
			fl.ID++
			f, err := AppendFrame(nil, &fl, &h, payload)
			if err != nil {
				t.Fatalf("%v: %v", h.Opcode, err)
			}
			frames = append(frames, f)
		}
		for i := 0; i < 256; i++ {
			op := Opcode(i)
			info := op.Info()
			if !info.Valid() || info.Transport == TransportRD {
				continue
			}
			h := Header{Opcode: op, AckReq: info.Position.Ends() && info.Request, SE: info.Imm,
				RDETH: 5, DETH: DETHFields{QKey: 0x11111111, SrcQP: 0x11}, Imm: 0x01020304, IETH: 0xabcd,
				AETH: AETHFields{Syndrome: ACKUnlimited, MSN: 7}, AtomicAck: 42,
				AtomicETH: AtomicFields{VA: 0x7f0000001000, RKey: 0x99, SwapAdd: 1, Compare: 2}}
			n := 0
			switch info.Position {
			case PosFirst, PosMiddle:
				n = pmtu
			case PosLast:
				n = 100
			case PosOnly:
				n = 50
			}
			h.RETH = RETHFields{VA: 0x7f0000002000, RKey: 0x98, DMALen: uint32(n)}
			if info.Position == PosFirst {
				h.RETH.DMALen = 2*pmtu + 100
			}
			if op == RCReadRequest {
				h.RETH.DMALen = 2*pmtu + 100
			}
			if op == CNP {
				h.BECN = true
			}
			add(h, n)
		}
		for _, s := range []Syndrome{ACKCredits(10), RNRNAK(14), NAKPSNSequence, NAKInvalidRequest, NAKRemoteAccess, NAKRemoteOperation, NAKInvalidRDRequest} {
			add(Header{Opcode: RCAcknowledge, AETH: AETHFields{Syndrome: s, MSN: 3}}, 0)
		}
		add(Header{Opcode: RCSendOnly, FECN: true, BECN: true}, 0)
	}
	return frames
}

// writePcap writes Ethernet frames as a classic pcap file.
func writePcap(t testing.TB, path string, frames [][]byte) {
	b := make([]byte, 24, 1<<16)
	binary.LittleEndian.PutUint32(b[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(b[4:], 2)
	binary.LittleEndian.PutUint16(b[6:], 4)
	binary.LittleEndian.PutUint32(b[16:], 65535)
	binary.LittleEndian.PutUint32(b[20:], 1) // Ethernet
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, f := range frames {
		var rec [16]byte
		tt := ts.Add(time.Duration(i) * time.Microsecond)
		binary.LittleEndian.PutUint32(rec[0:], uint32(tt.Unix()))
		binary.LittleEndian.PutUint32(rec[4:], uint32(tt.Nanosecond()/1000))
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(f)))
		binary.LittleEndian.PutUint32(rec[12:], uint32(len(f)))
		b = append(append(b, rec[:]...), f...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSampleFramesParse(t *testing.T) {
	for i, fr := range sampleFrames(t) {
		if err := checkPacket(fr, 1024); err != nil {
			t.Errorf("frame %d: %v", i+1, err)
		}
	}
}

// annexA19 says whether an opcode is one of IBA annex A19's (FLUSH,
// ATOMIC WRITE), which the independent checker predates: it calls them
// unknown opcodes but still judges their ICRC.
func annexA19(fr []byte) bool {
	op, err := frameOpcode(fr)
	return err == nil && (op == RCFlush || op == RCAtomicWrite)
}

// frameOpcode reads the BTH opcode of an Ethernet RoCEv2 frame.
func frameOpcode(fr []byte) (Opcode, error) {
	var f Frame
	if err := ParseFrame(fr, &f); err != nil {
		return 0, err
	}
	return Opcode(fr[f.L4+UDPLen]), nil
}

// runChecker has the checker judge frames and returns its lines, one a frame,
// and its summary line.
func runChecker(t *testing.T, checker, name string, frames [][]byte) ([]string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	writePcap(t, path, frames)
	out, err := testenv.WireCheckCommand(t, checker, "--pmtu", "1024", "--strict", path).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 1 || !strings.Contains(lines[len(lines)-1], "passed,") {
		t.Fatalf("%s: %v\n%s", checker, err, out)
	}
	if os.Getenv("GOROCE_KEEP_CAPTURE") != "" {
		t.Logf("capture kept at %s", path)
	}
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestWireCheck has the independent checker (tshark and scapy, named by
// GOROCE_WIRE_CHECK) judge a capture of frames built by this package.
func TestWireCheck(t *testing.T) {
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		testenv.Skip(t, testenv.WireCheck, "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) not set")
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		testenv.Skip(t, testenv.WireCheck, "tshark not installed")
	}
	var known, a19 [][]byte
	for _, fr := range sampleFrames(t) {
		if annexA19(fr) {
			a19 = append(a19, fr)
		} else {
			known = append(known, fr)
		}
	}
	_, last := runChecker(t, checker, "goroce-built.pcap", known)
	if want := strconv.Itoa(len(known)) + " passed, 0 failed"; last != want {
		t.Fatalf("checker said %q, want %q", last, want)
	}
	// FLUSH and ATOMIC WRITE: the checker must find the ICRC right (its own
	// computation, and scapy's where it has one) and complain of nothing but
	// the opcode it does not know.
	lines, _ := runChecker(t, checker, "goroce-built-a19.pcap", a19)
	frames := 0
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "frame ") {
			continue
		}
		frames++
		_, complaint, _ := strings.Cut(l, "!!")
		if !strings.Contains(l, " own=OK") || strings.Contains(l, "scapy=BAD") ||
			!strings.HasPrefix(strings.TrimSpace(complaint), "unknown opcode 0x1") || strings.Contains(complaint, ";") {
			t.Errorf("annex A19 frame: %s", l)
		}
	}
	if frames != len(a19) || frames != 4 {
		t.Errorf("checker judged %d annex A19 frames, wrote %d (want 4)", frames, len(a19))
	}
}

// TestWiresharkPayloadDissectorsOff runs tshark on SENDs of 2 and 6
// bytes, the sizes whose payload tshark 4.0's RPC-over-RDMA heuristic
// claims and calls Malformed, under the configuration testenv gives the
// wire checker: the InfiniBand dissector must decode each frame, hand
// the payload to no upper protocol, and find nothing malformed.
func TestWiresharkPayloadDissectorsOff(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		testenv.Skip(t, testenv.WireCheck, "tshark not installed")
	}
	var frames [][]byte
	fl := Flow{SrcMAC: MAC{2, 0, 0, 0, 0, 1}, DstMAC: MAC{2, 0, 0, 0, 0, 2},
		Src: addr4(10, 0, 0, 1), Dst: addr4(10, 0, 0, 2), SrcPort: SourcePort(0, 0x11, 0x12)}
	for i, n := range []int{2, 6} {
		h := Header{Opcode: RCSendOnly, AckReq: true, PKey: DefaultPKey, DestQP: 0x11, PSN: PSN(i)}
		f, err := AppendFrame(nil, &fl, &h, make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	path := filepath.Join(t.TempDir(), "short-sends.pcap")
	writePcap(t, path, frames)
	tshark := func(env []string) []string {
		cmd := exec.Command("tshark", "-n", "-r", path, "-d", "udp.port==4791,infiniband",
			"-T", "fields", "-e", "frame.protocols", "-e", "_ws.malformed")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	for _, l := range tshark(os.Environ()) {
		t.Logf("tshark, its own configuration: %s", l)
	}
	lines := tshark(testenv.WiresharkEnv(t))
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames: %q", len(lines), len(frames), lines)
	}
	for i, l := range lines {
		if !strings.HasSuffix(strings.TrimSpace(l), "infiniband:data") {
			t.Errorf("frame %d (%d-byte SEND): %q, want the payload left as data and nothing malformed", i+1, []int{2, 6}[i], l)
		}
	}
}
