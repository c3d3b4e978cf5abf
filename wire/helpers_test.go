package wire

import (
	"net/netip"
	"testing"
)

func addr4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }

func addr6(last byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 15: last})
}

// builtFrame returns the parsed frame AppendFrame builds of the header and
// payload over fl.
func builtFrame(t *testing.T, fl *Flow, h *Header, payload []byte) Frame {
	t.Helper()
	frame, err := AppendFrame(nil, fl, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := ParseFrame(frame, &f); err != nil {
		t.Fatal(err)
	}
	return f
}
