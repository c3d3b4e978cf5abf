package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/wire"
)

var testEpoch = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// writePcap writes frames as a nanosecond pcap, frame i at testEpoch + i µs.
func writePcap(t testing.TB, w io.Writer, lt LinkType, frames [][]byte) {
	t.Helper()
	writePcapTimes(t, w, lt, frames, nil)
}

func writePcapTimes(t testing.TB, w io.Writer, lt LinkType, frames [][]byte, times []time.Time) {
	t.Helper()
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(65535, layers.LinkType(lt)); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		ts := testEpoch.Add(time.Duration(i) * time.Microsecond)
		if times != nil {
			ts = times[i]
		}
		if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(f), Length: len(f)}, f); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t testing.TB, dir, name string, write func(w io.Writer)) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	write(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// Link-layer conversions of an untagged Ethernet frame.
func toSLL(eth []byte) []byte {
	h := make([]byte, SLLLen, SLLLen+len(eth))
	binary.BigEndian.PutUint16(h[0:], 4) // sent by us
	binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
	binary.BigEndian.PutUint16(h[4:], 6)
	copy(h[6:], eth[6:12])
	copy(h[14:], eth[12:14])
	return append(h, eth[wire.EthernetLen:]...)
}

func toSLL2(eth []byte) []byte {
	h := make([]byte, SLL2Len, SLL2Len+len(eth))
	copy(h[0:], eth[12:14])
	binary.BigEndian.PutUint32(h[4:], 3) // ifindex
	binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
	h[10], h[11] = 0, 6
	copy(h[12:], eth[6:12])
	return append(h, eth[wire.EthernetLen:]...)
}

func toRaw(eth []byte) []byte { return bytes.Clone(eth[wire.EthernetLen:]) }

func withTags(tpids ...uint16) func([]byte) []byte {
	return func(eth []byte) []byte {
		b := append([]byte(nil), eth[:12]...)
		for i, tpid := range tpids {
			b = binary.BigEndian.AppendUint16(b, tpid)
			b = binary.BigEndian.AppendUint16(b, uint16(100+i)|5<<13)
		}
		return append(b, eth[12:]...)
	}
}

// jsonLines decodes a file and returns AppendJSON of every RoCEv2 packet.
func jsonLines(t testing.TB, path string) []string {
	t.Helper()
	var out []string
	for _, p := range decodeFile(t, path, 0) {
		if p.RoCE {
			out = append(out, string(AppendJSON(nil, &p)))
		}
	}
	return out
}

// The golden frames decode the same whatever the container and link type.
func TestLinkTypesAndFormats(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"golden", "golden-ipv6"} {
		src := filepath.Join(testdata, name+".pcap")
		want := jsonLines(t, src)
		var frames [][]byte
		var times []time.Time
		for _, p := range decodeFile(t, src, 0) {
			frames = append(frames, p.Data)
			times = append(times, p.Time)
		}
		conv := func(f func([]byte) []byte) [][]byte {
			var out [][]byte
			for _, fr := range frames {
				out = append(out, f(fr))
			}
			return out
		}
		rawIP := LinkIPv4
		if name == "golden-ipv6" {
			rawIP = LinkIPv6
		}
		pcapOf := func(lt LinkType, fr [][]byte) func(io.Writer) {
			return func(w io.Writer) { writePcapTimes(t, w, lt, fr, times) }
		}
		files := map[string]func(io.Writer){
			"sll.pcap":      pcapOf(LinkSLL, conv(toSLL)),
			"sll2.pcap":     pcapOf(LinkSLL2, conv(toSLL2)),
			"raw101.pcap":   pcapOf(LinkRaw, conv(toRaw)),
			"raw12.pcap":    pcapOf(LinkRawDLT12, conv(toRaw)),
			"raw14.pcap":    pcapOf(LinkRawDLT14, conv(toRaw)),
			"rawip.pcap":    pcapOf(rawIP, conv(toRaw)),
			"vlan.pcap":     pcapOf(LinkEthernet, conv(withTags(wire.EtherTypeVLAN))),
			"qinq.pcap":     pcapOf(LinkEthernet, conv(withTags(wire.EtherTypeQinQ, wire.EtherTypeVLAN))),
			"micro.pcap":    func(w io.Writer) { writeMicroPcap(t, w, frames, times) },
			"ethernet.pcap": pcapOf(LinkEthernet, frames),
			"pcap.gz": func(w io.Writer) {
				zw := gzip.NewWriter(w)
				writePcapTimes(t, zw, LinkEthernet, frames, times)
				if err := zw.Close(); err != nil {
					t.Fatal(err)
				}
			},
			"ethernet.pcapng": func(w io.Writer) {
				nw, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
				if err != nil {
					t.Fatal(err)
				}
				for i, f := range frames {
					if err := nw.WritePacket(gopacket.CaptureInfo{Timestamp: times[i], CaptureLength: len(f), Length: len(f)}, f); err != nil {
						t.Fatal(err)
					}
				}
				if err := nw.Flush(); err != nil {
					t.Fatal(err)
				}
			},
			// Interfaces of different link types in one file.
			"mixed.pcapng": func(w io.Writer) {
				nw, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
				if err != nil {
					t.Fatal(err)
				}
				intf := pcapgo.DefaultNgInterface
				intf.LinkType = layers.LinkTypeLinuxSLL2
				id, err := nw.AddInterface(intf)
				if err != nil {
					t.Fatal(err)
				}
				for i, f := range frames {
					ci := gopacket.CaptureInfo{Timestamp: times[i]}
					if i%2 == 1 {
						f, ci.InterfaceIndex = toSLL2(f), id
					}
					ci.CaptureLength, ci.Length = len(f), len(f)
					if err := nw.WritePacket(ci, f); err != nil {
						t.Fatal(err)
					}
				}
				if err := nw.Flush(); err != nil {
					t.Fatal(err)
				}
			},
		}
		for fname, write := range files {
			t.Run(name+"/"+fname, func(t *testing.T) {
				got := jsonLines(t, writeFile(t, dir, name+"-"+fname, write))
				if len(got) != len(want) {
					t.Fatalf("%d RoCEv2 packets, want %d", len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("packet %d:\n got %s\nwant %s", i+1, got[i], want[i])
					}
				}
			})
		}
	}
}

// writeMicroPcap writes a big-endian microsecond pcap by hand (pcapgo writes
// little-endian only), to cover the other byte order and resolution.
func writeMicroPcap(t testing.TB, w io.Writer, frames [][]byte, times []time.Time) {
	t.Helper()
	var b []byte
	b = binary.BigEndian.AppendUint32(b, 0xA1B2C3D4)
	b = binary.BigEndian.AppendUint16(b, 2)
	b = binary.BigEndian.AppendUint16(b, 4)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 65535)
	b = binary.BigEndian.AppendUint32(b, uint32(LinkEthernet))
	for i, f := range frames {
		if times[i].Nanosecond()%1000 != 0 {
			t.Fatal("timestamp finer than a microsecond")
		}
		b = binary.BigEndian.AppendUint32(b, uint32(times[i].Unix()))
		b = binary.BigEndian.AppendUint32(b, uint32(times[i].Nanosecond()/1000))
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}

// goldenFrame returns the Ethernet frame of golden.pcap's packet i (from 0).
func goldenFrame(t testing.TB, i int) []byte {
	t.Helper()
	return bytes.Clone(decodeFile(t, filepath.Join(testdata, "golden.pcap"), 0)[i].Data)
}

func decodeOne(lt LinkType, data []byte, length int) Packet {
	var d Decoder
	var p Packet
	rec := Record{Index: 1, Time: testEpoch, LinkType: lt, Data: data, Length: max(length, len(data))}
	d.Decode(&rec, &p)
	return p
}

func fixIPv4Checksum(b []byte) {
	wire.IPv4(b[wire.EthernetLen:]).SetChecksum()
}

// Packets that are not RoCEv2 are skipped; RoCEv2 packets with framing
// problems are reported, decoded as far as they go.
func TestFraming(t *testing.T) {
	base := goldenFrame(t, 0) // RC SEND ONLY, 13 B
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(base)) }
	tests := []struct {
		name    string
		lt      LinkType
		data    []byte
		length  int
		roce    bool
		err     error
		icrc    ICRCStatus
		hasBTH  bool
		trusted bool
	}{
		{"ok", LinkEthernet, base, 0, true, nil, ICRCOK, true, true},
		{"ethernet padding", LinkEthernet, append(bytes.Clone(base), 0, 0, 0, 0, 0, 0), 0, true, nil, ICRCOK, true, true},
		{"other UDP port", LinkEthernet, mod(func(b []byte) []byte { b[37] = 0x35; return b }), 0, false, nil, 0, false, false},
		{"TCP", LinkEthernet, mod(func(b []byte) []byte { b[23] = 6; fixIPv4Checksum(b); return b }), 0, false, nil, 0, false, false},
		{"ARP", LinkEthernet, mod(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), 0, false, nil, 0, false, false},
		{"runt", LinkEthernet, base[:10], 0, false, nil, 0, false, false},
		{"SLL not IP", LinkSLL, make([]byte, 40), 0, false, nil, 0, false, false},
		{"SLL2 short", LinkSLL2, make([]byte, 10), 0, false, nil, 0, false, false},
		{"raw empty", LinkRaw, nil, 0, false, nil, 0, false, false},
		{"unsupported link", LinkType(147), base, 0, false, nil, 0, false, false},
		{"bad IP checksum", LinkEthernet, mod(func(b []byte) []byte { b[24] ^= 0xFF; return b }), 0, true, wire.ErrIPChecksum, ICRCOK, true, false},
		{"fragment", LinkEthernet, mod(func(b []byte) []byte { b[20] |= 0x20; fixIPv4Checksum(b); return b }), 0, true, wire.ErrIPFragment, ICRCBad, true, false},
		{"later fragment", LinkEthernet, mod(func(b []byte) []byte { b[21] = 0x10; fixIPv4Checksum(b); return b }), 0, false, nil, 0, false, false},
		{"IP length", LinkEthernet, mod(func(b []byte) []byte { b[17] += 4; fixIPv4Checksum(b); return b }), 0, true, wire.ErrIPLength, ICRCBad, true, false},
		{"UDP length", LinkEthernet, mod(func(b []byte) []byte { b[39] -= 4; return b }), 0, true, wire.ErrUDPLength, ICRCBad, true, false},
		{"IP options", LinkEthernet, ipOptions(base), 0, true, wire.ErrIPOptions, ICRCUnchecked, true, false},
		{"snapped", LinkEthernet, base[:60], len(base), true, ErrSnapped, ICRCUnchecked, true, false},
		{"snapped before BTH", LinkEthernet, base[:45], len(base), true, ErrSnapped, ICRCUnchecked, false, false},
		{"UDP payload shorter than BTH", LinkEthernet, shortUDP(base, 6), 0, true, wire.ErrTruncatedBTH, ICRCUnchecked, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decodeOne(tt.lt, tt.data, tt.length)
			if p.RoCE != tt.roce {
				t.Fatalf("RoCE=%v, want %v (Err=%v)", p.RoCE, tt.roce, p.Err)
			}
			if !tt.roce {
				return
			}
			if !errors.Is(p.Err, tt.err) || (tt.err == nil) != (p.Err == nil) {
				t.Errorf("Err=%v, want %v", p.Err, tt.err)
			}
			if p.ICRC != tt.icrc {
				t.Errorf("ICRC=%v, want %v", p.ICRC, tt.icrc)
			}
			if (p.BTH() != nil) != tt.hasBTH {
				t.Errorf("BTH present=%v, want %v", p.BTH() != nil, tt.hasBTH)
			}
			if p.Trusted() != tt.trusted {
				t.Errorf("Trusted=%v, want %v", p.Trusted(), tt.trusted)
			}
			if p.Bad() != (tt.err != nil || tt.icrc == ICRCBad) {
				t.Errorf("Bad=%v", p.Bad())
			}
			// Every format copes with what could be decoded.
			jsonOf(t, &p)
			AppendLine(nil, &p)
			AppendVerbose(nil, &p)
		})
	}
}

// ipOptions inserts a 4-byte IPv4 option (NOP x4) after the header.
func ipOptions(eth []byte) []byte {
	b := append([]byte(nil), eth[:wire.EthernetLen+wire.IPv4Len]...)
	b = append(b, 1, 1, 1, 1)
	b = append(b, eth[wire.EthernetLen+wire.IPv4Len:]...)
	ip := b[wire.EthernetLen:]
	ip[0] = 0x46
	binary.BigEndian.PutUint16(ip[2:], binary.BigEndian.Uint16(ip[2:])+4)
	wire.IPv4(ip).SetChecksum()
	return b
}

// shortUDP cuts the UDP payload to n bytes, keeping the lengths consistent.
func shortUDP(eth []byte, n int) []byte {
	b := bytes.Clone(eth[:wire.EthernetLen+wire.IPv4UDPLen+n])
	ip := b[wire.EthernetLen:]
	binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4UDPLen+n))
	wire.IPv4(ip).SetChecksum()
	binary.BigEndian.PutUint16(ip[wire.IPv4Len+4:], uint16(wire.UDPLen+n))
	return b
}

// The verbose format shows each link-layer header's own fields.
func TestVerboseLinkHeaders(t *testing.T) {
	eth := goldenFrame(t, 0)
	tests := []struct {
		lt   LinkType
		data []byte
		want []string
	}{
		{LinkEthernet, withTags(wire.EtherTypeQinQ, wire.EtherTypeVLAN)(eth), []string{
			"    Ethernet II\n", "        source: 02:00:00:00:00:01\n",
			"        VLAN tag: TPID 0x88a8 (802.1ad), PCP 5, DEI 0, VID 100\n",
			"        VLAN tag: TPID 0x8100 (802.1Q), PCP 5, DEI 0, VID 101\n",
			"        type: 0x0800 (IPv4)\n"}},
		{LinkSLL, toSLL(eth), []string{"    Linux cooked capture v1\n", "        packet type: 4 (sent by us)\n",
			"        address: 02:00:00:00:00:01\n", "        protocol: 0x0800 (IPv4)\n"}},
		{LinkSLL2, toSLL2(eth), []string{"    Linux cooked capture v2\n", "        interface index: 3\n",
			"        ARPHRD type: 1\n", "        address: 02:00:00:00:00:01\n"}},
		{LinkRaw, toRaw(eth), []string{"    raw IP (no link-layer header)\n", "        source: 10.0.0.1\n"}},
	}
	for _, tt := range tests {
		p := decodeOne(tt.lt, tt.data, 0)
		if !p.RoCE || p.Bad() {
			t.Fatalf("%v: RoCE=%v Err=%v", tt.lt, p.RoCE, p.Err)
		}
		if tt.lt == LinkEthernet && (!p.Frame.HasVLAN || p.Frame.VLAN != 100) {
			t.Errorf("VLAN %v %d", p.Frame.HasVLAN, p.Frame.VLAN)
		}
		v := string(AppendVerbose(nil, &p))
		for _, w := range tt.want {
			if !strings.Contains(v, w) {
				t.Errorf("%v: verbose output lacks %q:\n%s", tt.lt, w, v)
			}
		}
	}
}
