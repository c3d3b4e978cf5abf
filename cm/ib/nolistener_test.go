package ib

import (
	"net/netip"
	"testing"
)

func TestRejectNoListener(t *testing.T) {
	req := REQ{LocalCommID: 0x12345678, ServiceID: ServiceID(PortSpaceTCP, 7174), LocalQPN: 0x11, PathMTU: 3}
	h := CMAHeader{SrcPort: 40000, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	h.Marshal(req.PrivateData[:])
	mad := AppendMAD(nil, 0xabcdef0123, &req)
	var out [MADSize]byte
	if !RejectNoListener(&out, mad) {
		t.Fatal("a REQ was not answered")
	}
	hdr, body, err := CheckCM(out[:])
	if err != nil || hdr.TID != 0xabcdef0123 || hdr.AttrID != AttrREJ {
		t.Fatalf("answer header %+v, %v", hdr, err)
	}
	m, err := Parse(hdr.AttrID, body)
	if err != nil {
		t.Fatal(err)
	}
	rej := m.(*REJ)
	if rej.Reason != RejInvalidServiceID || rej.RemoteCommID != 0x12345678 || rej.LocalCommID != 0 || rej.MsgRejected != KindREQ {
		t.Fatalf("REJ %+v", rej)
	}
	// Anything but a REQ is not answered.
	rtu := AppendMAD(nil, 1, &RTU{LocalCommID: 1, RemoteCommID: 2})
	for _, bad := range [][]byte{rtu, mad[:100], nil, append([]byte{2}, mad[1:]...)} {
		if RejectNoListener(&out, bad) {
			t.Errorf("answered % x", bad[:min(len(bad), 24)])
		}
	}
	if n := testing.AllocsPerRun(100, func() { RejectNoListener(&out, mad) }); n != 0 {
		t.Errorf("RejectNoListener allocates %v times", n)
	}
}
