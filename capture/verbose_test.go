package capture

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/verbose")

// checkGolden compares got with testdata/verbose/name, or rewrites that file
// when the test runs with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "verbose", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < max(len(gl), len(wl)); i++ {
		var g, w []byte
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if !bytes.Equal(g, w) {
			t.Fatalf("%s differs at line %d:\n got %q\nwant %q", path, i+1, g, w)
		}
	}
	t.Fatalf("%s differs", path)
}

// The verbose output of every packet of the test captures is exactly the one
// recorded in testdata/verbose, as goroce decode -v prints it.
func TestVerboseGolden(t *testing.T) {
	for _, tt := range []struct {
		file string
		pmtu int
	}{
		{"golden.pcap", 0},
		{"golden-ipv6.pcap", 0},
		{"broken.pcap", 1024},
	} {
		t.Run(tt.file, func(t *testing.T) {
			var out []byte
			for _, p := range decodeFile(t, filepath.Join(testdata, tt.file), tt.pmtu) {
				if p.RoCE {
					out = append(AppendVerbose(out, &p), '\n')
				}
			}
			checkGolden(t, tt.file+".txt", out)
		})
	}
}

// framingCases are records of every link type with framing problems, each
// decoded as far as it goes or skipped.
func framingCases(t *testing.T) []struct {
	name string
	lt   LinkType
	data []byte
	len  int
} {
	t.Helper()
	eth := goldenFrame(t, 0) // RC SEND ONLY, IPv4, UDP checksum 0
	eth6 := bytes.Clone(decodeFile(t, filepath.Join(testdata, "golden-ipv6.pcap"), 0)[0].Data)
	const ip, udp = wire.EthernetLen, wire.EthernetLen + wire.IPv4Len
	mod := func(base []byte, f func(b []byte)) []byte {
		b := bytes.Clone(base)
		f(b)
		return b
	}
	mod4 := func(f func(b []byte)) []byte { return mod(eth, f) }
	fix := func(b []byte) { wire.IPv4(b[ip:]).SetChecksum() }
	put16 := binary.BigEndian.PutUint16
	badSum := mod4(func(b []byte) { b[ip+10] ^= 0xFF })
	opts := ipOptions(eth)
	sllOdd := toSLL(eth)
	put16(sllOdd[0:], 9)  // no name
	put16(sllOdd[4:], 10) // longer than the 8 address bytes
	sll2Odd := toSLL2(eth)
	sll2Odd[10], sll2Odd[11] = 7, 2
	ihl4 := mod4(func(b []byte) { b[ip] = 0x44; fix(b) })
	fl := wire.Flow{SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, DstMAC: wire.MAC{2, 0, 0, 0, 0, 2},
		Src: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}), SrcPort: 0xC000}
	build := func(h wire.Header, payload []byte) []byte {
		b, err := wire.AppendFrame(nil, &fl, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rd := build(wire.Header{Opcode: 0x44, PKey: wire.DefaultPKey, DestQP: 7, PSN: 3, RDETH: 0xABCDEF,
		DETH: wire.DETHFields{QKey: 0x11223344, SrcQP: 9}}, []byte("rd"))
	cnp := build(wire.Header{Opcode: wire.CNP, PKey: wire.DefaultPKey, DestQP: 7, BECN: true}, nil)
	cnp[udp+wire.UDPLen+wire.BTHLen+3] = 1 // reserved byte not zero
	if err := wire.SetICRC(cnp[ip:udp+wire.UDPLen], cnp[udp+wire.UDPLen:]); err != nil {
		t.Fatal(err)
	}
	return []struct {
		name string
		lt   LinkType
		data []byte
		len  int
	}{
		{"ethernet", LinkEthernet, eth, 0},
		{"ethernet ipv6", LinkEthernet, eth6, 0},
		{"vlan", LinkEthernet, withTags(wire.EtherTypeVLAN)(eth), 0},
		{"qinq", LinkEthernet, withTags(wire.EtherTypeQinQ, wire.EtherTypeVLAN)(eth), 0},
		{"three tags", LinkEthernet, withTags(wire.EtherTypeQinQ, wire.EtherTypeVLAN, wire.EtherTypeVLAN)(eth), 0},
		{"sll", LinkSLL, toSLL(eth), 0},
		{"sll odd", LinkSLL, sllOdd, 0},
		{"sll2", LinkSLL2, toSLL2(eth), 0},
		{"sll2 odd", LinkSLL2, sll2Odd, 0},
		{"sll2 ipv6", LinkSLL2, toSLL2(eth6), 0},
		{"raw", LinkRaw, toRaw(eth), 0},
		{"raw ipv4", LinkIPv4, toRaw(eth), 0},
		{"raw ipv6", LinkIPv6, toRaw(eth6), 0},
		{"ethernet padding", LinkEthernet, append(bytes.Clone(eth), 0, 0, 0, 0, 0, 0), 0},
		{"runt", LinkEthernet, eth[:10], 0},
		{"truncated VLAN tag", LinkEthernet, withTags(wire.EtherTypeVLAN)(eth)[:15], 0},
		{"ends at EtherType", LinkEthernet, eth[:ip], 0},
		{"truncated IPv4", LinkEthernet, eth[:ip+12], 0},
		{"truncated IPv6", LinkEthernet, eth6[:ip+30], 0},
		{"truncated UDP bad checksum", LinkEthernet, badSum[:udp+4], 0},
		{"bad IP checksum", LinkEthernet, badSum, 0},
		{"bad IP checksum vlan", LinkEthernet, withTags(wire.EtherTypeVLAN)(badSum), 0},
		{"bad IP checksum qinq", LinkEthernet, withTags(wire.EtherTypeQinQ, wire.EtherTypeVLAN)(badSum), 0},
		{"bad IP checksum raw", LinkRaw, toRaw(badSum), 0},
		{"bad IP checksum sll", LinkSLL, toSLL(badSum), 0},
		{"bad IP checksum other port", LinkEthernet, mod(badSum, func(b []byte) { b[udp+3] = 0x35 }), 0},
		{"bad IP checksum TCP", LinkEthernet, mod(badSum, func(b []byte) { b[ip+9] = 6 }), 0},
		{"bad IP checksum later fragment", LinkEthernet, mod(badSum, func(b []byte) { b[ip+7] = 1 }), 0},
		{"bad IP checksum snapped", LinkEthernet, badSum[:60], len(badSum)},
		{"other UDP port", LinkEthernet, mod4(func(b []byte) { b[udp+3] = 0x35 }), 0},
		{"TCP", LinkEthernet, mod4(func(b []byte) { b[ip+9] = 6; fix(b) }), 0},
		{"ARP", LinkEthernet, mod4(func(b []byte) { b[12], b[13] = 0x08, 0x06 }), 0},
		{"IP version 5", LinkEthernet, mod4(func(b []byte) { b[ip] = 0x55; fix(b) }), 0},
		{"fragment", LinkEthernet, mod4(func(b []byte) { b[ip+6] |= 0x20; fix(b) }), 0},
		{"later fragment", LinkEthernet, mod4(func(b []byte) { b[ip+7] = 0x10; fix(b) }), 0},
		{"IP length long", LinkEthernet, mod4(func(b []byte) { b[ip+3] += 4; fix(b) }), 0},
		{"IP length huge", LinkEthernet, mod4(func(b []byte) { put16(b[ip+2:], 0xFFFF); fix(b) }), 0},
		{"IP length zero", LinkEthernet, mod4(func(b []byte) { put16(b[ip+2:], 0); fix(b) }), 0},
		{"IP length short", LinkEthernet, mod4(func(b []byte) { b[ip+3] -= 4; fix(b) }), 0},
		{"IP length short raw", LinkRaw, toRaw(mod4(func(b []byte) { b[ip+3] -= 4; fix(b) })), 0},
		{"UDP length short", LinkEthernet, mod4(func(b []byte) { b[udp+5] -= 4 }), 0},
		{"UDP length long", LinkEthernet, mod4(func(b []byte) { b[udp+5] += 4 }), 0},
		{"UDP length below 8", LinkEthernet, mod4(func(b []byte) { put16(b[udp+4:], 3) }), 0},
		{"UDP length short sll2", LinkSLL2, toSLL2(mod4(func(b []byte) { b[udp+5] -= 4 })), 0},
		{"IP options", LinkEthernet, opts, 0},
		{"IP options raw", LinkIPv4, toRaw(opts), 0},
		{"IP options bad checksum", LinkEthernet, mod(opts, func(b []byte) { b[ip+10] ^= 1 }), 0},
		{"IP options truncated", LinkEthernet, opts[:ip+26], 0},
		{"IP options TCP", LinkEthernet, mod(opts, func(b []byte) { b[ip+9] = 6; fix(b) }), 0},
		{"IHL 4", LinkEthernet, ihl4, 0},
		{"snapped", LinkEthernet, eth[:60], len(eth)},
		{"snapped before BTH", LinkEthernet, eth[:45], len(eth)},
		{"snapped raw", LinkRaw, toRaw(eth)[:40], len(eth) - wire.EthernetLen},
		{"UDP payload shorter than BTH", LinkEthernet, shortUDP(eth, 6), 0},
		{"ipv6 payload length long", LinkEthernet, mod(eth6, func(b []byte) { b[ip+5] += 4 }), 0},
		{"ipv6 payload length short", LinkEthernet, mod(eth6, func(b []byte) { b[ip+5] -= 4 }), 0},
		{"ipv6 payload length below 8", LinkEthernet, mod(eth6, func(b []byte) { put16(b[ip+4:], 4) }), 0},
		{"ipv6 UDP length short", LinkEthernet, mod(eth6, func(b []byte) { b[ip+wire.IPv6Len+5] -= 4 }), 0},
		{"ipv6 not UDP", LinkEthernet, mod(eth6, func(b []byte) { b[ip+6] = 6 }), 0},
		{"ipv6 bad UDP checksum", LinkEthernet, mod(eth6, func(b []byte) { b[ip+wire.IPv6Len+6] ^= 1 }), 0},
		{"ipv6 no UDP checksum", LinkEthernet, mod(eth6, func(b []byte) { put16(b[ip+wire.IPv6Len+6:], 0) }), 0},
		{"ipv6 snapped", LinkEthernet, eth6[:80], len(eth6)},
		{"RD SEND ONLY", LinkEthernet, rd, 0},
		{"CNP reserved not zero", LinkEthernet, cnp, 0},
	}
}

// Records with framing problems decode, are skipped or print exactly as
// recorded in testdata/verbose/framing.txt.
func TestFramingGolden(t *testing.T) {
	var out []byte
	for _, c := range framingCases(t) {
		p := decodeOne(c.lt, c.data, c.len)
		out = fmt.Appendf(out, "== %s (%v)\n", c.name, c.lt)
		if !p.RoCE {
			out = append(out, "not RoCEv2\n\n"...)
			continue
		}
		f := &p.Frame
		out = fmt.Appendf(out, "err=%v vlan=%v/%d ip=%d l3=%d l4=%d end=%d\n", p.Err, f.HasVLAN, f.VLAN, f.IPVersion, f.L3, f.L4, f.End)
		out = append(AppendLine(out, &p), '\n')
		out = append(AppendJSON(out, &p), '\n')
		out = append(AppendVerbose(out, &p), '\n')
	}
	checkGolden(t, "framing.txt", out)
}

// TestNamesFlushAtomicWrite: the one-line, JSON and verbose decodings name
// FLUSH and ATOMIC WRITE and show the FETH.
func TestNamesFlushAtomicWrite(t *testing.T) {
	flow := wire.Flow{SrcMAC: wire.MAC{2, 0, 0, 0, 0, 1}, DstMAC: wire.MAC{2, 0, 0, 0, 0, 2},
		Src: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}), SrcPort: 0xC000}
	h := wire.Header{Opcode: wire.RCFlush, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 3, AckReq: true,
		FlushType: wire.FlushGlobal, FlushLevel: wire.FlushMR, RETH: wire.RETHFields{VA: 0x1000, RKey: 0x2233, DMALen: 64}}
	fl, err := wire.AppendFrame(nil, &flow, &h, nil)
	if err != nil {
		t.Fatal(err)
	}
	h = wire.Header{Opcode: wire.RCAtomicWrite, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 4, AckReq: true,
		RETH: wire.RETHFields{VA: 0x2000, RKey: 0x2233, DMALen: 8}}
	aw, err := wire.AppendFrame(nil, &flow, &h, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b    []byte
		want []string
	}{
		{fl, []string{"RC_FLUSH(0x1c)", "FETH[type=1 sel=1]", `"FETH":{"type":1,"sel":1}`, "placement type (1 global, 2 persistent): 1"}},
		{aw, []string{"RC_ATOMIC_WRITE(0x1d)", "dlen=8", "payload=8"}},
	} {
		pk := decodeOne(LinkEthernet, c.b, 0)
		p := &pk
		if !p.Parsed || p.Err != nil || p.ICRC != ICRCOK {
			t.Fatalf("decode: parsed %v err %v icrc %v", p.Parsed, p.Err, p.ICRC)
		}
		out := string(AppendLine(nil, p)) + "\n" + string(AppendJSON(nil, p)) + "\n" + string(AppendVerbose(nil, p))
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("decoding lacks %q:\n%s", w, out)
			}
		}
	}
}
