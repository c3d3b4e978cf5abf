package packetio

import (
	"errors"
	"net/netip"
	"testing"
)

// TestTxLender: Lend lends at most the batch, none when closed or asked for
// none; Take refuses more than was lent, and after Close, and takes the
// lent packets back, so that a second Transmit of the same batch is
// refused.
func TestTxLender(t *testing.T) {
	l := NewTxLender(4, 64)
	for _, c := range []struct {
		name   string
		closed bool
		lend   int // TxBatch(lend), or none when negative
		take   int
		lent   int   // packets TxBatch lent
		err    error // of Take
	}{
		{"lend 2, take 2", false, 2, 2, 2, nil},
		{"take again", false, -1, 1, 0, ErrNotLent},
		{"take none after a take", false, -1, 0, 0, nil},
		{"lend 9 of a batch of 4", false, 9, 4, 4, nil},
		{"lend 3, take 4", false, 3, 4, 3, ErrNotLent},
		{"lend 0", false, 0, 1, 0, ErrNotLent},
		{"lend when closed", true, 2, 0, 0, ErrClosed},
	} {
		if c.lend >= 0 {
			tx := l.Lend(c.closed, c.lend)
			if len(tx) != c.lent {
				t.Errorf("%s: %d lent, want %d", c.name, len(tx), c.lent)
			}
			for i, p := range tx {
				if len(p.Buf) != 0 || cap(p.Buf) != 64 {
					t.Errorf("%s: packet %d: len %d cap %d, want 0, 64", c.name, i, len(p.Buf), cap(p.Buf))
				}
			}
		}
		if err := l.Take(c.closed, c.take); !errors.Is(err, c.err) {
			t.Errorf("%s: Take(%d): %v, want %v", c.name, c.take, err, c.err)
		}
	}
}

// TestTxDest: an IPv4 (or IPv4-mapped) or IPv6 destination, not
// unspecified and without a zone, and a packet no longer than the largest
// pass, unmapped; anything else is named. SameFamily tells a Conn's
// family from the other.
func TestTxDest(t *testing.T) {
	for _, c := range []struct {
		addr string
		n    int
		want error
	}{
		{"10.0.0.1", 64, nil},
		{"::ffff:10.0.0.1", 64, nil},
		{"10.0.0.1", 65, ErrTooLarge},
		{"0.0.0.0", 1, ErrAddress},
		{"fd99::2", 1, nil},
		{"fe80::1%eth0", 1, ErrAddress},
		{"::", 1, ErrAddress},
		{"", 1, ErrAddress},
	} {
		var a netip.Addr
		if c.addr != "" {
			a = netip.MustParseAddr(c.addr)
		}
		got, err := TxDest(&Packet{Buf: make([]byte, c.n), Addr: a}, 64)
		if !errors.Is(err, c.want) || (err == nil && got != a.Unmap()) {
			t.Errorf("%q, %d bytes: %v, %v; want %v", c.addr, c.n, got, err, c.want)
		}
	}
	v4, v6, mapped := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd99::1"), netip.MustParseAddr("::ffff:10.0.0.2")
	if !SameFamily(v4, mapped) || !SameFamily(mapped, v4) || !SameFamily(v6, v6) || SameFamily(v4, v6) || SameFamily(v6, mapped) {
		t.Error("SameFamily: IPv4 and IPv4-mapped are one family, IPv6 another")
	}
}

// PacketTOS: 0 keeps the Conn's TOS; another value is the packet's DSCP
// with its ECN field, ECT(0) when that is 0, not-ECT under NoECN.
func TestPacketTOS(t *testing.T) {
	for _, c := range []struct {
		tos, conn uint8
		noECN     bool
		want      uint8
	}{
		{0, ECT0, false, ECT0},
		{0, 0x22, false, 0x22},
		{0xB8, ECT0, false, 0xBA},
		{0xB9, ECT0, false, 0xB9},
		{0xBB, ECT0, false, 0xBB},
		{0xB8, 0, true, 0xB8},
		{0xBA, 0, true, 0xB8},
		{0, 0, true, 0},
	} {
		if got := PacketTOS(c.tos, c.conn, c.noECN); got != c.want {
			t.Errorf("PacketTOS(%#02x, %#02x, %v) = %#02x, want %#02x", c.tos, c.conn, c.noECN, got, c.want)
		}
	}
}
