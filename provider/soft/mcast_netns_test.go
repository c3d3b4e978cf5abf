//go:build linux

package soft

import (
	"bytes"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/engine"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

const mcastQKey = 0x11111111

// UD multicast between two namespaces over the udp packet path, IPv4
// (group 239.1.2.3, GID ::ffff:239.1.2.3) and IPv6 (ff0e::1:3): B's two UD
// QPs attached to the group each receive A's send to the group's GID and
// QPN 0xFFFFFF, with the GRH naming the group as destination; a third,
// not attached, receives nothing; A's own attached QP receives its own
// send (the kernel's multicast loopback, as a NIC's); on the wire (an
// AF_PACKET capture on B's veth) the datagram goes to the group, its BTH
// to 0xFFFFFF, its ICRC right over the real IP header. After one QP
// detaches, only the other receives; after the last detaches, B leaves
// the IP group and receives nothing. Hostile attaches and detaches fail
// with verbs.ErrInvalidAttr.
//
// On the uring and afxdp paths as on udp (both ends on one path; an
// AF_XDP device's sends bypass the kernel, which loops none back: its own
// QP receives nothing).
func TestMcastNetns(t *testing.T) {
	for _, path := range []string{"udp", "uring", "afxdp"} {
		for _, v6 := range []bool{false, true} {
			name := path + "/ipv4"
			if v6 {
				name = path + "/ipv6"
			}
			t.Run(name, func(t *testing.T) { mcastNetns(t, v6, path) })
		}
	}
}

func mcastNetns(t *testing.T, v6 bool, path string) {
	p := netns.NewPair(t, netns.Options{})
	a, b := p.AddrA, p.AddrB
	group := netip.MustParseAddr("239.1.2.3")
	if v6 {
		a, b = ipv6Addrs(t, p)
		group = netip.MustParseAddr("ff0e::1:3")
	} else {
		for _, ns := range []*netns.NS{p.A, p.B} {
			if out, err := exec.Command("ip", "-n", ns.Name, "route", "add", "239.0.0.0/8", "dev", netns.LinkName).CombinedOutput(); err != nil {
				t.Fatalf("multicast route in %s: %v\n%s", ns.Name, err, out)
			}
		}
	}
	da, db := openIn(t, p.A, a, path), openIn(t, p.B, b, path)
	if !strings.HasPrefix(da.Path(), path) || !strings.HasPrefix(db.Path(), path) {
		t.Skipf("the %s path is not available here: devices on %s and %s", path, da.Path(), db.Path())
	}
	capt := newWireCapture(t, p.B, netns.LinkName)
	gid := verbs.GIDFromAddr(group)
	ra, rb := e2eNewRes(t, da, 1<<16), e2eNewRes(t, db, 1<<16)
	rcqA, scqA := ra.cq(t, 8), ra.cq(t, 8)
	ua := ra.qp(t, verbs.QPTUD, scqA, rcqA, nil, 8)
	var ub [3]verbs.QP
	var rcq [3]verbs.CQ
	for i := range ub {
		rcq[i] = rb.cq(t, 8)
		ub[i] = rb.qp(t, verbs.QPTUD, rb.cq(t, 8), rcq[i], nil, 8)
		e2eUDToRTS(t, ub[i], mcastQKey, 0)
	}
	e2eUDToRTS(t, ua, mcastQKey, 0)
	mcastHostile(t, rb, ub[0], gid, b)
	for _, x := range []verbs.QP{ub[0], ub[1], ua} {
		e2eMust(t, x.(verbs.McastAttacher).AttachMcast(gid, 0))
	}
	e2eMust(t, ub[0].(verbs.McastAttacher).AttachMcast(gid, 0)) // twice: no error, one delivery
	attr := verbs.AHAttr{DGID: gid, SGIDIndex: uint8(da.GIDIndex()), PortNum: 1, HopLimit: 1}
	ah, err := ra.pd.CreateAH(&attr)
	e2eMust(t, err)
	defer ah.Destroy()

	send := func(seed uint64) {
		t.Helper()
		e2eFill(ra.buf[:256], seed)
		_, err := ua.PostSend([]verbs.SendWR{{WRID: seed, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: ra.sge(0, 256), AH: ah, RemoteQPN: uint32(engine.McastQPN), RemoteQKey: mcastQKey}})
		e2eMust(t, err)
		// The send's completion, before the buffer is filled again.
		if w := e2ePoll(t, "A's send", scqA, 1)[0]; w.Status != verbs.WCSuccess || w.WRID != seed {
			t.Fatalf("send %d: %+v", seed, w)
		}
	}
	post := func(i int) {
		_, err := ub[i].PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: rb.sge(4096*(i+1), 40+256)}})
		e2eMust(t, err)
	}
	for i := range ub {
		post(i)
	}
	_, err = ua.PostRecv([]verbs.RecvWR{{WRID: 9, SGList: ra.sge(4096, 40+256)}})
	e2eMust(t, err)
	send(1)
	for i := 0; i < 2; i++ {
		mcastCheckRecv(t, "B's QP "+string(rune('0'+i)), rcq[i], uint64(i), rb.buf[4096*(i+1):], ua.Num(), a, group, ra.buf[:256])
	}
	e2eNoMore(t, "B's QP 2 (not attached)", rcq[2])
	// A's own QP: its device's loopback copy (not on AF_XDP).
	if path != "afxdp" {
		mcastCheckRecv(t, "A's own QP", rcqA, 9, ra.buf[4096:], ua.Num(), a, group, ra.buf[:256])
	} else {
		time.Sleep(100 * time.Millisecond)
		e2eNoMore(t, "A's own QP on AF_XDP", rcqA)
	}
	mcastCheckWire(t, capt.frames(t), a, group, 1)

	// One detached: only the other receives.
	e2eMust(t, ub[1].(verbs.McastAttacher).DetachMcast(gid, 0))
	post(0)
	send(2)
	mcastCheckRecv(t, "B's QP 0", rcq[0], 0, rb.buf[4096:], ua.Num(), a, group, ra.buf[:256])
	time.Sleep(100 * time.Millisecond)
	e2eNoMore(t, "B's QP 1 (detached)", rcq[1])
	// The last of B's detached: B leaves the group.
	e2eMust(t, ub[0].(verbs.McastAttacher).DetachMcast(gid, 0))
	post(0)
	before := db.Stats()
	send(3)
	time.Sleep(300 * time.Millisecond)
	for i := range rcq {
		e2eNoMore(t, "B's QP "+string(rune('0'+i)), rcq[i])
	}
	if after := db.Stats(); after.RxPackets != before.RxPackets {
		t.Errorf("B took in %d packets after leaving the group", after.RxPackets-before.RxPackets)
	}
	if err := ub[0].(verbs.McastAttacher).DetachMcast(gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach twice: %v, want ErrInvalidAttr", err)
	}
}

// mcastHostile tries the attaches and detaches rdma_rxe refuses: an RC QP,
// a unicast GID, a group of the other family, a detach of a group not
// attached, a destroyed QP.
func mcastHostile(t *testing.T, r *e2eRes, ud verbs.QP, gid verbs.GID, self netip.Addr) {
	t.Helper()
	rc := r.qp(t, verbs.QPTRC, r.cq(t, 2), r.cq(t, 2), nil, 2)
	other := verbs.GIDFromAddr(netip.MustParseAddr("ff0e::9"))
	if self.Is6() {
		other = verbs.GIDFromAddr(netip.MustParseAddr("239.9.9.9"))
	}
	for _, c := range []struct {
		what string
		qp   verbs.QP
		gid  verbs.GID
	}{{"an RC QP", rc, gid}, {"a unicast GID", ud, verbs.GIDFromAddr(self)}, {"the other family's group", ud, other},
		{"the zero GID", ud, verbs.GID{}}} {
		if err := c.qp.(verbs.McastAttacher).AttachMcast(c.gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("attach %s: %v, want ErrInvalidAttr", c.what, err)
		}
	}
	if err := ud.(verbs.McastAttacher).DetachMcast(gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach a group not attached: %v, want ErrInvalidAttr", err)
	}
	e2eMust(t, rc.Destroy())
	if err := rc.(verbs.McastAttacher).AttachMcast(gid, 0); !errors.Is(err, verbs.ErrDestroyed) {
		t.Errorf("attach a destroyed QP: %v, want ErrDestroyed", err)
	}
}

// mcastCheckRecv takes one receive completion (wrid) from cq and checks it
// and its buffer buf: the GRH from src to the group, the payload want.
func mcastCheckRecv(t *testing.T, name string, cq verbs.CQ, wrid uint64, buf []byte, srcQP uint32, src, group netip.Addr, want []byte) {
	t.Helper()
	w := e2ePoll(t, name, cq, 1)[0]
	if w.Status != verbs.WCSuccess || w.WRID != wrid || w.ByteLen != uint32(40+len(want)) || w.SrcQP != srcQP || w.Flags&verbs.WCFlagGRH == 0 {
		t.Fatalf("%s: %+v; want wrid %d, %d bytes from QP %#x with a GRH", name, w, wrid, 40+len(want), srcQP)
	}
	if group.Is6() {
		if g := wire.IPv6(buf[:40]); g.Src() != src || g.Dst() != group {
			t.Errorf("%s: GRH %v -> %v, want %v -> %v", name, g.Src(), g.Dst(), src, group)
		}
	} else if g := wire.IPv4(buf[20:40]); g.Src() != src || g.Dst() != group {
		t.Errorf("%s: GRH %v -> %v, want %v -> %v", name, g.Src(), g.Dst(), src, group)
	}
	if !bytes.Equal(buf[40:40+len(want)], want) {
		t.Errorf("%s: payload differs", name)
	}
}

// mcastCheckWire checks the captured multicast datagrams: n of them from
// src to the group, to QPN 0xFFFFFF, each with its ICRC right over its
// real IP header.
func mcastCheckWire(t *testing.T, frames []wire.Frame, src, group netip.Addr, n int) {
	t.Helper()
	k := 0
	for i := range frames {
		f := &frames[i]
		if f.Dst() != group {
			continue
		}
		k++
		tr := f.Transport()
		if err := wire.CheckICRC(f.IPUDP(), tr); err != nil {
			t.Errorf("frame %d: ICRC: %v", i, err)
		}
		var pk wire.Packet
		if err := wire.Parse(tr, &pk); err != nil || pk.BTH().DestQP() != engine.McastQPN || pk.Info.Transport != wire.TransportUD || f.Src() != src {
			t.Errorf("frame %d: %v -> %v, %v (%v): want a UD packet to QPN 0xFFFFFF from %v", i, f.Src(), f.Dst(), pk.Info, err, src)
		}
	}
	if k != n {
		t.Errorf("%d frames to %v on the wire, want %d", k, group, n)
	}
	t.Logf("%d frames to %v on the wire, each to QPN 0xFFFFFF with its ICRC right", k, group)
}
