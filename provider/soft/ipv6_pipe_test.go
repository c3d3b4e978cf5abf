//go:build linux

package soft

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

// Two soft devices on IPv6 addresses over an in-memory pipe (no interface:
// GIDs 0, the link-local one, and 1, the device's address): an RC WRITE and
// READ between them, and the address family checks (an IPv4-mapped
// destination refused, as an IPv6 one on an IPv4 device).
func TestIPv6Pipe(t *testing.T) {
	a6, b6 := netip.MustParseAddr("fd00:76::1"), netip.MustParseAddr("fd00:76::2")
	ca, cb := pipe.New(a6, b6, pipe.Options{})
	da, err := New(Options{Name: "v6a", Conn: ca})
	e2eMust(t, err)
	defer da.Close()
	db, err := New(Options{Name: "v6b", Conn: cb})
	e2eMust(t, err)
	defer db.Close()
	if da.GIDIndex() != 1 || len(da.GIDs()) != 2 || da.GID() != verbs.GIDFromAddr(a6) || da.Addr() != a6 {
		t.Fatalf("GIDs %v, the device's at %d; want [link-local, %v] at 1", da.GIDs(), da.GIDIndex(), a6)
	}
	ra, rb := e2eNewRes(t, da, 1<<16), e2eNewRes(t, db, 1<<16)
	send := ra.cq(t, 8)
	qa := ra.qp(t, verbs.QPTRC, send, ra.cq(t, 8), nil, 8)
	qb := rb.qp(t, verbs.QPTRC, rb.cq(t, 8), rb.cq(t, 8), nil, 8)
	e2eConnect(t, verbs.MTU1024, qa, da, 100, qb, db, 200)
	e2eFill(ra.buf[:8192], 5)
	_, err = qa.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: ra.sge(0, 8192), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()},
		{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: ra.sge(8192, 8192), RemoteAddr: rb.mr.Addr(), RKey: rb.mr.RKey()},
	})
	e2eMust(t, err)
	w := &e2eCQWant{name: "send", cq: send, n: 2}
	e2eCollect(t, w)
	if w.got[0].Status != verbs.WCSuccess || w.got[1].Status != verbs.WCSuccess {
		t.Fatalf("WCs %+v", w.got)
	}
	e2eSame(t, "WRITE", rb.buf[:8192], ra.buf[:8192])
	e2eSame(t, "READ", ra.buf[8192:16384], ra.buf[:8192])

	v4 := verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2"))
	if _, err := ra.pd.CreateAH(&verbs.AHAttr{SGIDIndex: 1, DGID: v4, PortNum: 1}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("an AH to %v on an IPv6 device: %v, want ErrInvalidAttr", v4.Addr(), err)
	}
	c4a, c4b := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	defer c4b.Close()
	d4, err := New(Options{Name: "v4", Conn: c4a})
	e2eMust(t, err)
	defer d4.Close()
	r4 := e2eNewRes(t, d4, 64)
	if _, err := r4.pd.CreateAH(&verbs.AHAttr{SGIDIndex: 1, DGID: verbs.GIDFromAddr(b6), PortNum: 1}); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("an AH to %v on an IPv4 device: %v, want ErrInvalidAttr", b6, err)
	}
}
