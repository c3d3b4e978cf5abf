package capture

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReader runs arbitrary bytes through the reader, the decoder, every
// format and the flow model: whatever the file holds, the result is an error
// or output, never a panic.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"golden.pcap", "broken.pcap", "golden-ipv6.pcap"} {
		b, err := os.ReadFile(filepath.Join(testdata, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:200])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		var (
			d   Decoder
			rec Record
			p   Packet
			buf []byte
			fs  = NewFlows()
		)
		for i := 0; i < 1000; i++ {
			if err := r.Next(&rec); err != nil {
				break
			}
			d.Decode(&rec, &p)
			fs.Add(&p)
			if p.RoCE {
				buf = AppendLine(buf[:0], &p)
				buf = AppendJSON(buf[:0], &p)
				buf = AppendVerbose(buf[:0], &p)
			}
		}
		WriteFlows(io.Discard, fs)
		WriteSummary(io.Discard, fs)
	})
}

// FuzzDecode runs arbitrary records of every link type through the decoder
// and the formats.
func FuzzDecode(f *testing.F) {
	for _, p := range decodeFile(f, filepath.Join(testdata, "broken.pcap"), 0) {
		f.Add(uint16(LinkEthernet), p.Data)
		f.Add(uint16(LinkRaw), toRaw(p.Data))
		f.Add(uint16(LinkSLL), toSLL(p.Data))
		f.Add(uint16(LinkSLL2), toSLL2(p.Data))
	}
	f.Fuzz(func(t *testing.T, lt uint16, data []byte) {
		for _, truncated := range []bool{false, true} {
			rec := Record{Index: 1, LinkType: LinkType(lt), Data: data, Length: len(data)}
			if truncated {
				rec.Length += 10
			}
			var d Decoder
			var p Packet
			d.Decode(&rec, &p)
			if !p.RoCE {
				continue
			}
			AppendLine(nil, &p)
			jsonOf(t, &p)
			AppendVerbose(nil, &p)
			fs := NewFlows()
			fs.Add(&p)
		}
	})
}

// Decoding a packet and formatting it as JSON allocate nothing once the
// output buffer has grown.
func TestDecodeAllocs(t *testing.T) {
	pkts := decodeFile(t, filepath.Join(testdata, "golden.pcap"), 0)
	d := Decoder{PMTU: 1024}
	var p Packet
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(10, func() {
		for i := range pkts {
			d.Decode(&pkts[i].Record, &p)
			buf = AppendJSON(buf[:0], &p)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run of %d packets", allocs, len(pkts))
	}
}
