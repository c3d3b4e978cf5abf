package soft

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// TestGIDTable checks the GID table laid out as rdma_rxe's: index 0 the
// link-local GID (on a pipe, which has no MAC, fe80:: and the GUID),
// index 1 the IPv4-mapped GID, nothing after; and that a QP or address
// handle may send from index 1 only, index 0 failing with an error that
// says to use 1.
func TestGIDTable(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2"), pipe.Options{})
	defer cb.Close()
	d, err := New(Options{Name: "gid", Conn: ca})
	must(t, err)
	defer d.Close()
	ctx, err := d.Open()
	must(t, err)
	pa, err := ctx.QueryPort(1)
	must(t, err)
	if pa.GIDTblLen != 2 {
		t.Errorf("GIDTblLen %d, want 2", pa.GIDTblLen)
	}
	g0, err := ctx.QueryGID(1, 0)
	must(t, err)
	want0 := verbs.GID{0: 0xfe, 1: 0x80}
	binary.BigEndian.PutUint64(want0[8:], d.GUID())
	if g0 != want0 || g0 != d.LinkLocalGID() || !g0.Addr().IsLinkLocalUnicast() {
		t.Errorf("GID 0 = %v, want %v", g0.Addr(), want0.Addr())
	}
	g1, err := ctx.QueryGID(1, verbs.DefaultGIDIndex)
	must(t, err)
	if g1 != verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.1")) || g1 != d.GID() {
		t.Errorf("GID 1 = %v, want ::ffff:10.9.0.1", g1.Addr())
	}
	for _, i := range []int{2, -1, 255} {
		if _, err := ctx.QueryGID(1, i); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("QueryGID(1, %d): %v, want ErrInvalidAttr", i, err)
		}
	}
	pd, err := ctx.AllocPD()
	must(t, err)
	peer := verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))
	for _, c := range []struct {
		sgid uint8
		ok   bool
		says string
	}{{1, true, ""}, {0, false, "use GID index 1"}, {2, false, "GIDs 0 (link-local) and 1"}} {
		ah, err := pd.CreateAH(&verbs.AHAttr{DGID: peer, SGIDIndex: c.sgid, PortNum: 1})
		if c.ok {
			must(t, err)
			ah.Destroy()
			continue
		}
		if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CreateAH from GID %d: %v, want ErrInvalidAttr saying %q", c.sgid, err, c.says)
		}
	}
	cq, err := ctx.CreateCQ(4, nil)
	must(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x11, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{DGID: peer, SGIDIndex: 0, PortNum: 1}}
	mask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	if err := qp.Modify(&rtr, mask); !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("RTR from GID 0: %v, want ErrInvalidAttr naming the link-local GID", err)
	}
	if a, _ := qp.Query(); a.State != verbs.QPSInit {
		t.Errorf("the refused RTR moved the QP to %v", a.State)
	}
	rtr.AHAttr.SGIDIndex = verbs.DefaultGIDIndex
	must(t, qp.Modify(&rtr, mask))
}

// TestGIDLinkLocalMAC checks GID 0 of a device on a veth: fe80:: and the
// modified EUI-64 of the interface's MAC (the U/L bit flipped, ff:fe in
// the middle), as the kernel derives the interface's link-local address.
func TestGIDLinkLocalMAC(t *testing.T) {
	netns.Require(t)
	pair := netns.NewPair(t, netns.Options{})
	var d *Device
	must(t, pair.A.Do(func() error {
		c, err := udp.Listen(pair.AddrA, udp.Options{})
		if err != nil {
			return err
		}
		d, err = New(Options{Name: "gid", Conn: c})
		return err
	}))
	defer d.Close()
	m := pair.MACA
	want := netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]})
	if got := d.LinkLocalGID().Addr(); got != want {
		t.Errorf("GID 0 = %v, want %v (MAC %v)", got, want, m)
	}
}
