package wire

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// SetUDPChecksum writes the checksum AppendFrame computes for an IPv6 frame,
// which CheckUDPChecksum then accepts; a flipped payload bit fails it.
func TestSetUDPChecksum(t *testing.T) {
	fl := Flow{Src: netip.MustParseAddr("fd99::1"), Dst: netip.MustParseAddr("fd99::2"), SrcPort: 0xC123, TrafficClass: 0xB8, HopLimit: 9, FlowLabel: 0x12345}
	h := Header{Opcode: RCSendOnly, PKey: DefaultPKey, DestQP: 0x11, PSN: 7}
	b, err := AppendFrame(nil, &fl, &h, []byte("the UDP checksum IPv6 requires"))
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := ParseFrame(b, &f); err != nil {
		t.Fatal(err)
	}
	want := f.UDP().Checksum()
	binary.BigEndian.PutUint16(b[f.L4+6:], 0)
	f.SetUDPChecksum()
	if got := f.UDP().Checksum(); got != want || want == 0 || f.CheckUDPChecksum() != nil {
		t.Fatalf("checksum %#04x, AppendFrame's %#04x", got, want)
	}
	b[len(b)-8] ^= 1
	if f.CheckUDPChecksum() == nil {
		t.Error("a flipped bit passed the checksum")
	}
	if ip := f.IPv6(); ip.TrafficClass() != 0xB8 || ip.HopLimit() != 9 || ip.FlowLabel() != 0x12345 {
		t.Errorf("IPv6 header: traffic class %#02x hop limit %d flow label %#x", ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel())
	}
}
