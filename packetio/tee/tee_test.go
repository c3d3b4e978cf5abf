package tee

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/goroce/goroce/wire"
)

// TestPcapWriterIncoming records a packet that arrived from a sender whose
// IPv4 Identification (0x1234) and cleared DF the receiving socket never
// saw: the recorded frame must carry them, so that its ICRC checks out,
// while a corrupted packet is recorded as it came and fails.
func TestPcapWriterIncoming(t *testing.T) {
	remote, local := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.1")
	fl := wire.Flow{Src: remote, Dst: local, SrcPort: 0xC123, ID: 0x1234}
	h := wire.Header{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 17, PSN: 5}
	frame, err := wire.AppendFrame(nil, &fl, &h, []byte("hello, incoming"))
	if err != nil {
		t.Fatal(err)
	}
	var f wire.Frame
	if err := wire.ParseFrame(frame, &f); err != nil {
		t.Fatal(err)
	}
	// AppendFrame sets DF; clear it as a sender with IP_PMTUDISC_DONT would.
	ip := f.IPv4()
	ip[6] &^= 0x40
	ip.SetChecksum()
	pkt := append([]byte(nil), f.Buf[f.L4+wire.UDPLen:]...)
	if err := wire.SetICRC(f.IPUDP(), pkt); err != nil {
		t.Fatal(err)
	}

	bad := append([]byte(nil), pkt...)
	bad[len(bad)-6] ^= 1

	var out bytes.Buffer
	pw, err := NewPcapWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	pw.Write(time.Now(), In, remote, local, 0xC123, pkt)
	pw.Write(time.Now(), In, remote, local, 0xC123, bad)
	if out.Len() != 24 {
		t.Fatalf("without Incoming, incoming packets were recorded (%d bytes)", out.Len())
	}
	pw.Incoming = true
	pw.Write(time.Now(), In, remote, local, 0xC123, pkt)
	pw.Write(time.Now(), In, remote, local, 0xC123, bad)
	if err := pw.Err(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	for i, wantOK := range []bool{true, false} {
		data, _, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		var g wire.Frame
		if err := wire.ParseFrame(data, &g); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !g.IPv4().ChecksumOK() {
			t.Errorf("record %d: bad IPv4 header checksum", i)
		}
		err = wire.CheckICRC(g.IPUDP(), data[g.L4+wire.UDPLen:])
		if (err == nil) != wantOK {
			t.Errorf("record %d: ICRC check %v, want ok=%v", i, err, wantOK)
		}
		if wantOK && (g.IPv4().ID() != 0x1234 || g.IPv4().DF()) {
			t.Errorf("record %d: Identification %#x DF %v, want the sender's 0x1234 without DF", i, g.IPv4().ID(), g.IPv4().DF())
		}
	}
}
