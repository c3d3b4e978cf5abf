package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The vectors in testdata were made by an independent implementation (scapy)
// and checked with tshark; see testdata/README.md.

type vectorFile struct {
	Meta struct {
		PMTU int `json:"pmtu"`
	} `json:"meta"`
	Vectors []vector `json:"vectors"`
}

type vector struct {
	Name       string                    `json:"name"`
	Opcode     int                       `json:"opcode"`
	OpcodeName string                    `json:"opcode_name"`
	IPVersion  int                       `json:"ip_version"`
	UDPSport   int                       `json:"udp_sport"`
	BTH        map[string]uint64         `json:"bth"`
	Ext        map[string]map[string]any `json:"ext"`
	FrameHex   string                    `json:"frame_hex"`
	ICRCHex    string                    `json:"icrc_hex"`
	PayloadLen int                       `json:"payload_len"`
	PayloadHex string                    `json:"payload_hex"`
	Expect     string                    `json:"expect"`
	ExpectFlag string                    `json:"expect_flag"`
}

func loadVectors(t testing.TB, name string) vectorFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // 64-bit values do not survive float64
	if err := d.Decode(&vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Vectors) == 0 {
		t.Fatalf("%s: no vectors", name)
	}
	return vf
}

func (v *vector) frame(t testing.TB) []byte {
	b, err := hex.DecodeString(v.FrameHex)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func num(t testing.TB, m map[string]any, k string) uint64 {
	t.Helper()
	n, ok := m[k].(json.Number)
	if !ok {
		t.Fatalf("field %q missing in %v", k, m)
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		t.Fatalf("field %q: %v", k, err)
	}
	return v
}

// checkFields compares a parsed packet with a vector's recorded fields.
func checkFields(t *testing.T, v *vector, p *Packet) {
	t.Helper()
	b := p.BTH()
	got := map[string]uint64{
		"opcode": uint64(b.Opcode()), "se": b2u(b.SE()), "m": b2u(b.MigReq()), "pad": uint64(b.PadCount()),
		"tver": uint64(b.TVer()), "pkey": uint64(b.PKey()), "fecn": b2u(b.FECN()), "becn": b2u(b.BECN()),
		"resv6a": uint64(b.Resv6a()), "dqpn": uint64(b.DestQP()), "ackreq": b2u(b.AckReq()),
		"resv7": uint64(b.Resv7()), "psn": uint64(b.PSN()),
	}
	for k, want := range v.BTH {
		if got[k] != want {
			t.Errorf("BTH %s = %d, want %d", k, got[k], want)
		}
	}
	if p.Opcode().String() != v.OpcodeName {
		t.Errorf("opcode name %q, want %q", p.Opcode().String(), v.OpcodeName)
	}
	var present []string
	for _, h := range []struct {
		name string
		ok   bool
	}{{"RETH", p.RETH() != nil}, {"AETH", p.AETH() != nil}, {"AtomicETH", p.AtomicETH() != nil},
		{"AtomicAckETH", p.AtomicAckETH() != nil}, {"DETH", p.DETH() != nil}, {"ImmDt", p.ImmDt() != nil},
		{"IETH", p.IETH() != nil}, {"CNPPad", p.Info.Headers&HasCNPPad != 0}} {
		if h.ok {
			present = append(present, h.name)
		}
		if _, want := v.Ext[h.name]; want != h.ok {
			t.Errorf("header %s present = %v, vector says %v", h.name, h.ok, want)
		}
	}
	for name, f := range v.Ext {
		switch name {
		case "RETH":
			r := p.RETH()
			eq(t, "RETH.va", r.VA(), num(t, f, "va"))
			eq(t, "RETH.rkey", uint64(r.RKey()), num(t, f, "rkey"))
			eq(t, "RETH.dlen", uint64(r.DMALen()), num(t, f, "dlen"))
		case "AETH":
			a := p.AETH()
			eq(t, "AETH.syndrome", uint64(a.Syndrome()), num(t, f, "syndrome"))
			eq(t, "AETH.msn", uint64(a.MSN()), num(t, f, "msn"))
		case "AtomicETH":
			a := p.AtomicETH()
			eq(t, "AtomicETH.va", a.VA(), num(t, f, "va"))
			eq(t, "AtomicETH.rkey", uint64(a.RKey()), num(t, f, "rkey"))
			eq(t, "AtomicETH.swap_add", a.SwapAdd(), num(t, f, "swap_add"))
			eq(t, "AtomicETH.compare", a.Compare(), num(t, f, "compare"))
		case "AtomicAckETH":
			eq(t, "AtomicAckETH.orig", p.AtomicAckETH().Orig(), num(t, f, "orig"))
		case "DETH":
			d := p.DETH()
			eq(t, "DETH.qkey", uint64(d.QKey()), num(t, f, "qkey"))
			eq(t, "DETH.srcqp", uint64(d.SrcQP()), num(t, f, "srcqp"))
			eq(t, "DETH.reserved", uint64(d.Reserved()), num(t, f, "reserved"))
		case "ImmDt":
			eq(t, "ImmDt.imm", uint64(p.ImmDt().Imm()), num(t, f, "imm"))
		case "IETH":
			eq(t, "IETH.rkey", uint64(p.IETH().RKey()), num(t, f, "rkey"))
		case "CNPPad":
		default:
			t.Errorf("vector has header %s the test does not know", name)
		}
	}
	if p.PayloadLen != v.PayloadLen {
		t.Errorf("payload length %d, want %d", p.PayloadLen, v.PayloadLen)
	}
	if hex.EncodeToString(p.Payload()) != v.PayloadHex {
		t.Errorf("payload %x, want %s", p.Payload(), v.PayloadHex)
	}
	if got := hex.EncodeToString(p.Buf[len(p.Buf)-ICRCLen:]); got != v.ICRCHex {
		t.Errorf("ICRC bytes %s, want %s", got, v.ICRCHex)
	}
}

func eq(t *testing.T, what string, got, want uint64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %#x, want %#x", what, got, want)
	}
}

// flowOf reads back the addressing of a parsed frame.
func flowOf(f *Frame) Flow {
	e := Ethernet(f.Buf)
	fl := Flow{SrcMAC: e.Src(), DstMAC: e.Dst(), Src: f.Src(), Dst: f.Dst(),
		SrcPort: f.UDP().SrcPort(), DstPort: f.UDP().DstPort()}
	if ip := f.IPv4(); ip != nil {
		fl.TrafficClass, fl.HopLimit, fl.ID = ip.TOS(), ip.TTL(), ip.ID()
	} else {
		ip := f.IPv6()
		fl.TrafficClass, fl.HopLimit, fl.FlowLabel = ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel()
	}
	return fl
}

func TestGoldenVectors(t *testing.T) {
	for _, file := range []string{"golden.json", "golden-ipv6.json"} {
		vf := loadVectors(t, file)
		for _, v := range vf.Vectors {
			t.Run(v.Name, func(t *testing.T) {
				frame := v.frame(t)
				var f Frame
				if err := ParseFrame(frame, &f); err != nil {
					t.Fatalf("ParseFrame: %v", err)
				}
				if f.IPVersion != v.IPVersion || int(f.UDP().SrcPort()) != v.UDPSport {
					t.Errorf("IP version %d sport %d, want %d %d", f.IPVersion, f.UDP().SrcPort(), v.IPVersion, v.UDPSport)
				}
				if err := f.CheckUDPChecksum(); err != nil {
					t.Errorf("UDP checksum: %v", err)
				}
				var p Packet
				if err := Parse(f.Transport(), &p); err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if err := p.CheckPMTU(vf.Meta.PMTU); err != nil {
					t.Errorf("CheckPMTU(%d): %v", vf.Meta.PMTU, err)
				}
				checkFields(t, &v, &p)
				if err := CheckICRC(f.IPUDP(), f.Transport()); err != nil {
					t.Errorf("CheckICRC: %v", err)
				}
				// Rebuild the whole frame from the decoded values.
				var h Header
				h.Load(&p)
				fl := flowOf(&f)
				out, err := AppendFrame(make([]byte, 0, 2048), &fl, &h, p.Payload())
				if err != nil {
					t.Fatalf("AppendFrame: %v", err)
				}
				if !bytes.Equal(out, frame) {
					t.Errorf("rebuilt frame differs\n got %x\nwant %x", out, frame)
				}
			})
		}
	}
}

// TestICRCMasked checks the vector whose TOS, TTL, FECN and BECN differ from
// rc_send_only's: the masked fields must not change the ICRC.
func TestICRCMasked(t *testing.T) {
	vf := loadVectors(t, "golden.json")
	var plain, masked []byte
	for _, v := range vf.Vectors {
		switch v.Name {
		case "rc_send_only":
			plain = v.frame(t)
		case "rc_send_only_masked_variant":
			masked = v.frame(t)
		}
	}
	if plain == nil || masked == nil {
		t.Fatal("vectors rc_send_only / rc_send_only_masked_variant missing")
	}
	if bytes.Equal(plain, masked) {
		t.Fatal("the two frames are identical: the test would prove nothing")
	}
	var fp, fm Frame
	if err := ParseFrame(plain, &fp); err != nil {
		t.Fatal(err)
	}
	if err := ParseFrame(masked, &fm); err != nil {
		t.Fatal(err)
	}
	cp, _ := ComputeICRC(fp.IPUDP(), fp.Transport())
	cm, _ := ComputeICRC(fm.IPUDP(), fm.Transport())
	if cp != cm {
		t.Errorf("ICRC %08x with masked fields changed, %08x without", cm, cp)
	}
	// Changing a covered field (the IPv4 Identification) must change it.
	ip := append([]byte(nil), fp.IPUDP()...)
	ip[5] ^= 1
	if c, _ := ComputeICRC(ip, fp.Transport()); c == cp {
		t.Error("ICRC did not change with the IPv4 Identification")
	}
}

// brokenSentinel maps each broken vector's expect_flag to the error it must
// produce.
var brokenSentinel = map[string]error{
	"ICRC":                 ErrICRC,
	"truncated":            ErrTruncatedRETH,
	"not 4-byte aligned":   ErrUnaligned,
	"pad bytes non-zero":   ErrPadNonZero,
	"pad count":            ErrPadNoPayload,
	"PMTU":                 ErrPMTU,
	"TVer":                 ErrTVer,
	"syndrome":             ErrSyndrome,
	"no payload":           ErrUnexpectedPayload,
	"DMA length":           ErrDMALength,
	"unknown opcode":       ErrUnknownOpcode,
	"aligned":              ErrAtomicAligned,
	"IPv4 header checksum": ErrIPChecksum,
}

// checkPacket runs every check a receiver makes, in order, and returns the
// first error.
func checkPacket(frame []byte, pmtu int) error {
	var f Frame
	if err := ParseFrame(frame, &f); err != nil {
		return err
	}
	var p Packet
	if err := Parse(f.Transport(), &p); err != nil {
		return err
	}
	if err := p.CheckPMTU(pmtu); err != nil {
		return err
	}
	return CheckICRC(f.IPUDP(), f.Transport())
}

func TestBrokenVectors(t *testing.T) {
	vf := loadVectors(t, "broken.json")
	for _, v := range vf.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			want, ok := brokenSentinel[v.ExpectFlag]
			if !ok {
				t.Fatalf("no sentinel for expect_flag %q", v.ExpectFlag)
			}
			err := checkPacket(v.frame(t), vf.Meta.PMTU)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, want) {
				t.Errorf("error %q, want %q", err, want)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("error %q is neither ErrMalformed nor ErrInvalidRequest", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(v.ExpectFlag)) {
				t.Errorf("error %q does not name %q", err, v.ExpectFlag)
			}
		})
	}
}

func TestGoldenPcapMatchesJSON(t *testing.T) {
	// The pcap files hold the same frames as the JSON (guards the test data).
	for _, name := range []string{"golden", "golden-ipv6", "broken"} {
		frames := readPcap(t, filepath.Join("testdata", name+".pcap"))
		vf := loadVectors(t, name+".json")
		if len(frames) != len(vf.Vectors) {
			t.Fatalf("%s: %d frames in pcap, %d vectors", name, len(frames), len(vf.Vectors))
		}
		for i, v := range vf.Vectors {
			if !bytes.Equal(frames[i], v.frame(t)) {
				t.Errorf("%s frame %d differs from vector %s", name, i+1, v.Name)
			}
		}
	}
}

// readPcap reads a classic little-endian microsecond pcap of Ethernet frames.
// (The wire package has no dependencies; the capture package reads every
// format through pcapgo.)
func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || !bytes.Equal(b[:4], []byte{0xd4, 0xc3, 0xb2, 0xa1}) {
		t.Fatalf("%s: not a little-endian pcap", path)
	}
	var out [][]byte
	for off := 24; off < len(b); {
		if off+16 > len(b) {
			t.Fatalf("%s: truncated record header", path)
		}
		n := int(uint32(b[off+8]) | uint32(b[off+9])<<8 | uint32(b[off+10])<<16 | uint32(b[off+11])<<24)
		off += 16
		if off+n > len(b) {
			t.Fatalf("%s: truncated record", path)
		}
		out = append(out, b[off:off+n])
		off += n
	}
	return out
}
