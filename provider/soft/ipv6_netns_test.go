//go:build linux

package soft

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// openIn opens a soft device on addr over the named packet path inside ns,
// closed at the end of the test.
func openIn(t *testing.T, ns *netns.NS, addr netip.Addr, path string) *Device {
	t.Helper()
	var d *Device
	if err := ns.Do(func() (err error) {
		d, _, err = Open(OpenOptions{Name: "v6", Addr: addr.String(), Path: path})
		return err
	}); err != nil {
		t.Fatalf("open a %s device on %v: %v", path, addr, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// The AV fields each direction's packets must carry.
var (
	ipv6AVA = verbs.AHAttr{TrafficClass: 0xB8, HopLimit: 9, FlowLabel: 0x12345}
	ipv6AVB = verbs.AHAttr{TrafficClass: 0x48, HopLimit: 33}
	ipv6AH  = verbs.AHAttr{TrafficClass: 0x60, HopLimit: 17, FlowLabel: 0xBEEF}
)

// RoCEv2 over IPv6 between two namespaces on each socket packet path: the
// GID table as rdma_rxe builds it (link-local, the IPv4-mapped GID of the
// veth's IPv4 address, the IPv6 address's at index 2), RC SEND, WRITE and
// READ of 64 KiB and a UD SEND between devices on IPv6 addresses, data
// intact, the UD receive's GRH the sender's IPv6 header; and on the wire
// (an AF_PACKET capture on the receiving veth) every packet carries the
// traffic class (its DSCP, ECT(0) added) and hop limit of its QP's address
// vector (RC, both ways: requests and responses) or its AH (UD), and an
// ICRC right for its real IPv6 header.
//
// AF_XDP's frames are seen by a capture on the other end only (its own
// receives are redirected before a capture sees them, its sends bypass
// it): it runs against udp both ways round, and a frame it built carries
// its address vector's flow label too; AF_XDP to AF_XDP moves the same
// data, uncaptured.
//
// TestIPv6Netns/ipv4 runs the same over IPv4 (GID index 1): the IP header
// from the address vector, on every path, in both families.
func TestIPv6Netns(t *testing.T) {
	for _, v6 := range []bool{true, false} {
		for _, c := range [][2]string{{"udp", "udp"}, {"uring", "uring"}, {"afxdp", "udp"}, {"udp", "afxdp"}, {"afxdp", "afxdp"}} {
			name := c[0] + "-" + c[1]
			if !v6 {
				name = "ipv4/" + name
			}
			t.Run(name, func(t *testing.T) { ipv6Netns(t, v6, c[0], c[1]) })
		}
	}
}

func ipv6Netns(t *testing.T, v6 bool, pathA, pathB string) {
	p := netns.NewPair(t, netns.Options{})
	a6, b6 := ipv6Addrs(t, p)
	if !v6 {
		a6, b6 = p.AddrA, p.AddrB
	}
	// The kernel segments GSO messages before the veths, so that the
	// capture sees each packet as it would cross a wire.
	for _, ns := range []*netns.NS{p.A, p.B} {
		e2eMust(t, ns.SetFeatures(netns.LinkName, map[string]bool{"tx-udp-segmentation": false}))
	}
	da, db := openIn(t, p.A, a6, pathA), openIn(t, p.B, b6, pathB)
	t.Logf("paths: %s; %s", da.Path(), db.Path())
	at := p.B
	if pathB == "afxdp" {
		at = p.A
	}
	capt := newWireCapture(t, at, netns.LinkName)
	if v6 {
		ipv6CheckGIDs(t, da, p.AddrA, a6)
	} else if da.GIDIndex() != 1 || len(da.GIDs()) != 3 || da.GIDs()[2].Addr().Is4() {
		t.Errorf("GIDs %v, the device's at %d: want the IPv4-mapped GID at 1, then the IPv6 one", da.GIDs(), da.GIDIndex())
	}

	ra, rb := e2eNewRes(t, da, 1<<18), e2eNewRes(t, db, 1<<18)
	sendA, recvB := ra.cq(t, 64), rb.cq(t, 64)
	qa := ra.qp(t, verbs.QPTRC, sendA, ra.cq(t, 64), nil, 16)
	qb := rb.qp(t, verbs.QPTRC, rb.cq(t, 64), recvB, nil, 16)
	ipv6RCToRTS(t, qa, qb.Num(), da, db, ipv6AVA)
	ipv6RCToRTS(t, qb, qa.Num(), db, da, ipv6AVB)
	const size = 64 << 10
	e2eFill(ra.buf[:size], 1)
	_, err := qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: rb.sge(0, size)}})
	e2eMust(t, err)
	// The WRITE before the SEND: B's receive completion, which the test
	// polls, then follows the WRITE's placement on B's side too.
	_, err = qa.PostSend([]verbs.SendWR{
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: ra.sge(0, size), RemoteAddr: rb.mr.Addr() + size, RKey: rb.mr.RKey()},
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ra.sge(0, size)},
		{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: ra.sge(size, size), RemoteAddr: rb.mr.Addr() + size, RKey: rb.mr.RKey()},
	})
	e2eMust(t, err)
	wa := &e2eCQWant{name: "a send", cq: sendA, n: 3}
	wb := &e2eCQWant{name: "b recv", cq: recvB, n: 1}
	e2eCollect(t, wa, wb)
	for _, w := range append(wa.got, wb.got...) {
		if w.Status != verbs.WCSuccess {
			t.Fatalf("WC %+v", w)
		}
	}
	e2eSame(t, "SEND", rb.buf[:size], ra.buf[:size])
	e2eSame(t, "WRITE", rb.buf[size:2*size], ra.buf[:size])
	e2eSame(t, "READ", ra.buf[size:2*size], ra.buf[:size])

	ipv6UD(t, ra, rb, db, b6, a6)
	if pathA == "afxdp" && pathB == "afxdp" {
		return // nothing to see: the other runs check AF_XDP's frames
	}
	ipv6CheckWire(t, capt.frames(t), a6, b6, pathA, pathB)
}

// ipv6CheckGIDs checks a device's GID table on a veth holding v4 and v6.
func ipv6CheckGIDs(t *testing.T, d *Device, v4, v6 netip.Addr) {
	t.Helper()
	ctx, err := d.Open()
	e2eMust(t, err)
	defer ctx.Close()
	pa, err := ctx.QueryPort(1)
	e2eMust(t, err)
	want := []verbs.GID{d.LinkLocalGID(), verbs.GIDFromAddr(v4), verbs.GIDFromAddr(v6)}
	if pa.GIDTblLen != len(want) || d.GIDIndex() != 2 || d.GID() != want[2] {
		t.Errorf("GID table of %d, the device's at %d (%v); want 3, at 2 (%v)", pa.GIDTblLen, d.GIDIndex(), d.GID(), want[2])
	}
	for i, w := range want {
		if g, err := ctx.QueryGID(1, i); err != nil || g != w {
			t.Errorf("GID %d = %v, %v; want %v", i, g, err, w)
		}
	}
	pd, err := ctx.AllocPD()
	e2eMust(t, err)
	defer pd.Dealloc()
	peer := verbs.GIDFromAddr(v6.Next())
	for _, c := range []struct {
		ah verbs.AHAttr
		ok bool
	}{
		{verbs.AHAttr{SGIDIndex: 2, DGID: peer}, true},
		{verbs.AHAttr{SGIDIndex: 1, DGID: peer}, false},
		{verbs.AHAttr{SGIDIndex: 0, DGID: peer}, false},
		{verbs.AHAttr{SGIDIndex: 2, DGID: verbs.GIDFromAddr(v4.Next())}, false},
	} {
		ah, err := pd.CreateAH(&c.ah)
		if c.ok && err == nil {
			ah.Destroy()
			continue
		}
		if c.ok || !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("CreateAH(SGID %d, DGID %v) = %v, want ok %v", c.ah.SGIDIndex, c.ah.DGID.Addr(), err, c.ok)
		}
	}
}

// ipv6RCToRTS moves an RC QP on d to RTS aimed at QPN peerQPN on peer,
// with the traffic class, hop limit and flow label of av.
func ipv6RCToRTS(t *testing.T, qp verbs.QP, peerQPN uint32, d, peer *Device, av verbs.AHAttr) {
	t.Helper()
	av.SGIDIndex, av.DGID, av.PortNum = uint8(d.GIDIndex()), peer.GID(), 1
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peerQPN, MaxDestRdAtomic: 16, MinRNRTimer: 12, AHAttr: av},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	e2eMust(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// ipv6UD sends 512 bytes from a UD QP on ra's device to one on rb's (db,
// on b6) through an AH with ipv6AH's fields, and checks the receive and
// its GRH (the IPv6 header from a6).
func ipv6UD(t *testing.T, ra, rb *e2eRes, db *Device, b6, a6 netip.Addr) {
	t.Helper()
	ua := ra.qp(t, verbs.QPTUD, ra.cq(t, 4), ra.cq(t, 4), nil, 4)
	udRecv := rb.cq(t, 4)
	ub := rb.qp(t, verbs.QPTUD, rb.cq(t, 4), udRecv, nil, 4)
	e2eUDToRTS(t, ua, 0x11111111, 0)
	e2eUDToRTS(t, ub, 0x11111111, 0)
	off := 3 << 16
	_, err := ub.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: rb.sge(off, 40+512)}})
	e2eMust(t, err)
	attr := ipv6AH
	attr.SGIDIndex, attr.DGID, attr.PortNum = uint8(ra.dev.GIDIndex()), db.GID(), 1
	ah, err := ra.pd.CreateAH(&attr)
	e2eMust(t, err)
	defer ah.Destroy()
	e2eFill(ra.buf[off:off+512], 9)
	_, err = ua.PostSend([]verbs.SendWR{{WRID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: ra.sge(off, 512), AH: ah, RemoteQPN: ub.Num(), RemoteQKey: 0x11111111}})
	e2eMust(t, err)
	w := &e2eCQWant{name: "ud recv", cq: udRecv, n: 1}
	e2eCollect(t, w)
	if w.got[0].Status != verbs.WCSuccess || w.got[0].ByteLen != 40+512 || w.got[0].Flags&verbs.WCFlagGRH == 0 {
		t.Fatalf("UD receive %+v", w.got[0])
	}
	if a6.Is6() {
		grh := wire.IPv6(rb.buf[off : off+40])
		if grh.Version() != 6 || grh.Src() != a6 || grh.Dst() != b6 {
			t.Errorf("GRH %x: want the IPv6 header from %v to %v", rb.buf[off:off+40], a6, b6)
		}
	} else if ip := wire.IPv4(rb.buf[off+20 : off+40]); ip.Src() != a6 || ip.Dst() != b6 {
		t.Errorf("GRH %x: want the IPv4 header from %v to %v in its last 20 bytes", rb.buf[off:off+40], a6, b6)
	}
	if !bytes.Equal(rb.buf[off+40:off+40+512], ra.buf[off:off+512]) {
		t.Error("UD payload differs")
	}
}

// ipv6CheckWire checks the captured frames' IP header fields against the
// address vectors, and their ICRCs over the real headers.
func ipv6CheckWire(t *testing.T, frames []wire.Frame, a6, b6 netip.Addr, pathA, pathB string) {
	t.Helper()
	var fromA, fromB, ud int
	for i := range frames {
		f := &frames[i]
		if (f.IPVersion == 6) != a6.Is6() {
			t.Errorf("frame %d: IPv%d", i, f.IPVersion)
			continue
		}
		tr := f.Transport()
		if err := wire.CheckICRC(f.IPUDP(), tr); err != nil {
			t.Errorf("frame %d (%v -> %v, %v): ICRC over its IPv6 header: %v", i, f.Src(), f.Dst(), wire.Opcode(tr[0]), err)
		}
		av := ipv6AVA
		switch {
		case wire.Opcode(tr[0]) == wire.UDSendOnly && wire.BTH(tr).DestQP() != 1:
			av = ipv6AH
			ud++
		case f.Src() == a6:
			fromA++
		case f.Src() == b6:
			av = ipv6AVB
			fromB++
		}
		if f.IPVersion == 6 && (f.Src() == a6 && pathA == "afxdp" || f.Src() == b6 && pathB == "afxdp") && f.IPv6().FlowLabel() != av.FlowLabel {
			t.Errorf("frame %d (%v, built by AF_XDP): flow label %#x, want %#x", i, wire.Opcode(tr[0]), f.IPv6().FlowLabel(), av.FlowLabel)
		}
		switch {
		case f.Src() == a6 || f.Src() == b6:
		default:
			t.Errorf("frame %d from %v", i, f.Src())
			continue
		}
		tos, hop, _ := ipFields(f)
		if want := packetio.PacketTOS(av.TrafficClass, packetio.ECT0, false); tos != want || hop != av.HopLimit {
			t.Errorf("frame %d (%v -> %v, %v): traffic class %#02x hop limit %d; want %#02x and %d", i, f.Src(), f.Dst(), wire.Opcode(tr[0]), tos, hop, want, av.HopLimit)
		}
	}
	// 64 KiB at path MTU 1024: 64 packets for each of SEND, WRITE and the
	// READ's responses; ACKs coalesce.
	if fromA < 2*64 || fromB < 64 || ud != 1 {
		t.Errorf("%s to %s: captured %d packets from A, %d from B, %d UD; want at least 128, 64 and 1", pathA, pathB, fromA, fromB, ud)
	}
	t.Logf("%s to %s: %d packets from A, %d from B, %d UD, all with their address vector's traffic class and hop limit", pathA, pathB, fromA, fromB, ud)
}
