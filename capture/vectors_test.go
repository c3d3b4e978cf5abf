package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goroce/goroce/wire"
)

// The vectors in ../wire/testdata were made by an independent implementation
// (scapy) and checked with tshark.
const testdata = "../wire/testdata"

type vectorFile struct {
	Meta struct {
		PMTU int `json:"pmtu"`
	} `json:"meta"`
	Vectors []map[string]any `json:"vectors"`
}

func loadVectors(t testing.TB, name string) vectorFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, name))
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

// decodeFile reads every record of a capture file and decodes it.
func decodeFile(t testing.TB, path string, pmtu int) []Packet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return decodeStream(t, f, pmtu)
}

func decodeStream(t testing.TB, in io.Reader, pmtu int) []Packet {
	t.Helper()
	r, err := NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	d := Decoder{PMTU: pmtu}
	var out []Packet
	for {
		var rec Record
		err := r.Next(&rec)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		rec.Data = bytes.Clone(rec.Data) // the reader reuses its buffer
		var p Packet
		d.Decode(&rec, &p)
		out = append(out, p)
	}
}

// jsonOf decodes AppendJSON's output of p into a map, numbers kept exact.
func jsonOf(t testing.TB, p *Packet) map[string]any {
	t.Helper()
	b := AppendJSON(nil, p)
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("AppendJSON output is not JSON: %v\n%s", err, b)
	}
	return m
}

// The decoded fields of every golden packet equal the vector file's, and
// every packet passes every check.
func TestGoldenVectors(t *testing.T) {
	for _, name := range []string{"golden", "golden-ipv6"} {
		t.Run(name, func(t *testing.T) {
			vf := loadVectors(t, name+".json")
			pkts := decodeFile(t, filepath.Join(testdata, name+".pcap"), 0)
			if len(pkts) != len(vf.Vectors) {
				t.Fatalf("%d packets in the pcap, %d vectors", len(pkts), len(vf.Vectors))
			}
			for i, v := range vf.Vectors {
				p := &pkts[i]
				t.Run(v["name"].(string), func(t *testing.T) {
					if !p.RoCE || p.Err != nil || p.ICRC != ICRCOK || p.Bad() || !p.Trusted() {
						t.Fatalf("RoCE=%v Err=%v ICRC=%v", p.RoCE, p.Err, p.ICRC)
					}
					got := jsonOf(t, p)
					for _, k := range []string{"frame", "opcode", "opcode_name", "ip_version", "bth", "ext", "payload_len", "icrc_hex"} {
						if !reflect.DeepEqual(got[k], v[k]) {
							t.Errorf("%s: got %v, want %v", k, got[k], v[k])
						}
					}
					if got["sport"] != v["udp_sport"] || got["icrc_ok"] != true || got["error"] != nil {
						t.Errorf("sport=%v icrc_ok=%v error=%v", got["sport"], got["icrc_ok"], got["error"])
					}
					line := string(AppendLine(nil, p))
					if !strings.HasSuffix(line, " ICRC=OK") || strings.Contains(line, "MALFORMED") {
						t.Errorf("line: %s", line)
					}
				})
			}
		})
	}
}

// reason is what the line format says is wrong with a packet.
func reason(p *Packet) string {
	line := string(AppendLine(nil, p))
	var r []string
	if i := strings.Index(line, "ICRC=BAD"); i >= 0 {
		r = append(r, line[i:])
	}
	if i := strings.Index(line, "MALFORMED: "); i >= 0 {
		r = append(r, line[i:])
	}
	return strings.Join(r, " ")
}

// Every broken packet is reported, with a reason that names its problem.
func TestBrokenVectors(t *testing.T) {
	vf := loadVectors(t, "broken.json")
	pkts := decodeFile(t, filepath.Join(testdata, "broken.pcap"), vf.Meta.PMTU)
	if len(pkts) != len(vf.Vectors) {
		t.Fatalf("%d packets in the pcap, %d vectors", len(pkts), len(vf.Vectors))
	}
	for i, v := range vf.Vectors {
		p := &pkts[i]
		t.Run(v["name"].(string), func(t *testing.T) {
			if !p.RoCE || !p.Bad() {
				t.Fatalf("not reported: RoCE=%v Err=%v ICRC=%v", p.RoCE, p.Err, p.ICRC)
			}
			flag := v["expect_flag"].(string)
			if r := reason(p); !strings.Contains(strings.ToLower(r), strings.ToLower(flag)) {
				t.Errorf("reason %q does not name %q", r, flag)
			}
			got := jsonOf(t, p)
			if !reflect.DeepEqual(got["bth"], v["bth"]) {
				t.Errorf("bth: got %v, want %v", got["bth"], v["bth"])
			}
			if got["icrc_hex"] != v["icrc_hex"] {
				t.Errorf("icrc_hex: got %v, want %v", got["icrc_hex"], v["icrc_hex"])
			}
			if got["error"] == nil {
				t.Error("JSON has no error")
			}
		})
	}
}

// Without a path MTU, only the LAST packet longer than the vectors' path MTU
// (but not than 4096) passes: nothing else in the file reveals the MTU.
func TestBrokenWithoutPMTU(t *testing.T) {
	vf := loadVectors(t, "broken.json")
	pkts := decodeFile(t, filepath.Join(testdata, "broken.pcap"), 0)
	for i, v := range vf.Vectors {
		want := v["name"] != "last_oversize"
		if got := pkts[i].Bad(); got != want {
			t.Errorf("%s: Bad()=%v, want %v (Err=%v)", v["name"], got, want, pkts[i].Err)
		}
	}
}

// Dump's totals decide the exit status of goroce decode.
func TestDumpTotals(t *testing.T) {
	tests := []struct {
		file            string
		pmtu            int
		mode            Mode
		roce, bad, icrc int
	}{
		{"golden.pcap", 0, ModeLines, 31, 0, 0},
		{"golden.pcap", 1024, ModeJSON, 31, 0, 0},
		{"golden-ipv6.pcap", 0, ModeVerbose, 1, 0, 0},
		{"broken.pcap", 1024, ModeLines, 16, 16, 1},
		{"broken.pcap", 1024, ModeSummary, 16, 16, 1},
		{"broken.pcap", 0, ModeFlows, 16, 15, 1},
	}
	for _, tt := range tests {
		f, err := os.Open(filepath.Join(testdata, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		tot, err := Dump(&out, r, Options{Mode: tt.mode, PMTU: tt.pmtu})
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if tot.RoCE != tt.roce || tot.Bad != tt.bad || tot.ICRCBad != tt.icrc || tot.Records != tt.roce || tot.Skipped != 0 {
			t.Errorf("%s mode %d: totals %+v", tt.file, tt.mode, tot)
		}
		if out.Len() == 0 {
			t.Errorf("%s mode %d: no output", tt.file, tt.mode)
		}
		if tt.mode == ModeJSON || tt.mode == ModeLines {
			if n := strings.Count(out.String(), "\n"); n != tt.roce {
				t.Errorf("%s mode %d: %d lines", tt.file, tt.mode, n)
			}
		}
	}
}

func TestNewReaderErrors(t *testing.T) {
	for _, in := range []string{"", "abc", "not a capture file at all"} {
		if _, err := NewReader(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: %v, want ErrFormat", in, err)
		}
	}
	// A gzip stream that is not gzip inside.
	if _, err := NewReader(bytes.NewReader([]byte{0x1f, 0x8b, 1, 2, 3})); err == nil {
		t.Error("bad gzip accepted")
	}
}

// A damaged file gives an error, never a panic, and the records before the
// damage are read.
func TestTruncatedFiles(t *testing.T) {
	for _, name := range []string{"golden.pcap", "broken.pcap"} {
		b, err := os.ReadFile(filepath.Join(testdata, name))
		if err != nil {
			t.Fatal(err)
		}
		full := len(decodeStream(t, bytes.NewReader(b), 0))
		for n := 0; n < len(b); n++ {
			r, err := NewReader(bytes.NewReader(b[:n]))
			if err != nil {
				if n >= 24 {
					t.Fatalf("%s[:%d]: header: %v", name, n, err)
				}
				continue
			}
			var tot Totals
			tot, err = Dump(io.Discard, r, Options{})
			if err == nil && n != len(b) {
				// A cut exactly between records is a shorter valid file.
				if tot.Records >= full {
					t.Fatalf("%s[:%d]: %d records and no error", name, n, tot.Records)
				}
				continue
			}
			if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%s[:%d]: %v, want an unexpected EOF", name, n, err)
			}
		}
	}
}

// Dump refuses a pcap whose link type it cannot decode.
func TestUnsupportedLinkType(t *testing.T) {
	var buf bytes.Buffer
	writePcap(t, &buf, 147, [][]byte{{1, 2, 3}}) // LINKTYPE_USER0
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dump(io.Discard, r, Options{}); !errors.Is(err, ErrLinkType) {
		t.Fatalf("got %v, want ErrLinkType", err)
	}
}

// The error texts of broken packets come from wire; make sure the ones the
// checks above rely on keep their class.
func TestErrorClasses(t *testing.T) {
	pkts := decodeFile(t, filepath.Join(testdata, "broken.pcap"), 1024)
	for i := range pkts {
		p := &pkts[i]
		if p.Err != nil && !errors.Is(p.Err, wire.ErrMalformed) && !errors.Is(p.Err, wire.ErrInvalidRequest) {
			t.Errorf("frame %d: %v is neither malformed nor invalid request", p.Index, p.Err)
		}
	}
}
