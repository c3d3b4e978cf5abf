package verbstest

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// mcastQPN is the destination QPN of a multicast send (IBA: 0xFFFFFF).
const mcastQPN = 0xFFFFFF

// RunMcast runs the multicast test alone (Run runs it among the others),
// for an Env whose McastGroup the sides can reach.
func RunMcast(t *testing.T, env Env) {
	env.defaults()
	testMcast(t, &env)
}

// testMcast attaches UD QPs to a multicast GID (McastAttacher): refused for
// an RC QP, a unicast GID, a detach of a group not attached (EINVAL as
// ib_core and rdma_rxe answer, verbs.ErrInvalidAttr); attaching twice is
// no error. With Env.McastGroup set, A's send to the group's GID and QPN
// 0xFFFFFF reaches both of B's attached QPs (one receive each, the GRH's
// destination the group), and, once one detached, only the other.
func testMcast(t *testing.T, env *Env) {
	a := newSide(t, env, env.A, env.GIDIndexA, false)
	b := newSide(t, env, env.B, env.GIDIndexB, false)
	rc := b.createQP(t, verbs.QPTRC, nil)
	qa, qb1, qb2 := a.createQP(t, verbs.QPTUD, nil), b.createQP(t, verbs.QPTUD, nil), b.createQP(t, verbs.QPTUD, nil)
	m1, ok := qb1.(verbs.McastAttacher)
	if !ok {
		t.Skip("the provider's QPs do not attach to multicast groups (no verbs.McastAttacher)")
	}
	group := env.McastGroup
	if !group.IsValid() {
		group = netip.MustParseAddr("239.1.2.3")
		if !b.gid.Addr().Is4() {
			group = netip.MustParseAddr("ff0e::1:3")
		}
	}
	gid := verbs.GIDFromAddr(group)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"attach an RC QP", rc.(verbs.McastAttacher).AttachMcast(gid, 0)},
		{"attach to a unicast GID", m1.AttachMcast(b.gid, 0)},
		{"detach from a group not attached", m1.DetachMcast(gid, 0)},
	} {
		if !errors.Is(c.err, verbs.ErrInvalidAttr) {
			t.Errorf("%s: %v, want verbs.ErrInvalidAttr", c.what, c.err)
		}
	}
	err := m1.AttachMcast(gid, 0)
	if errors.Is(err, verbs.ErrNotSupported) {
		t.Skipf("attach: %v", err)
	}
	check(t, "attach", err)
	check(t, "attach twice", m1.AttachMcast(gid, 0))
	check(t, "detach", m1.DetachMcast(gid, 0))
	if err := m1.DetachMcast(gid, 0); !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("detach once more: %v, want verbs.ErrInvalidAttr", err)
	}
	if !env.McastGroup.IsValid() {
		t.Log("Env.McastGroup is not set (no multicast route between the sides): attach and detach checked, not delivery")
		return
	}
	mcastDeliver(t, env, a, b, qa, qb1, qb2, gid)
}

// mcastDeliver sends from qa to the group gid, to which qb1 and qb2 are
// attached, then to qb1 alone.
func mcastDeliver(t *testing.T, env *Env, a, b *side, qa, qb1, qb2 verbs.QP, gid verbs.GID) {
	const qkey = 0x11111111
	for _, qp := range []verbs.QP{qa, qb1, qb2} {
		toRTSUD(t, env, qp, qkey)
	}
	check(t, "attach 1", qb1.(verbs.McastAttacher).AttachMcast(gid, 0))
	check(t, "attach 2", qb2.(verbs.McastAttacher).AttachMcast(gid, 0))
	ah, err := a.pd.CreateAH(&verbs.AHAttr{DGID: gid, SGIDIndex: uint8(a.gidx), HopLimit: 1, PortNum: env.Port})
	if err != nil {
		t.Fatalf("CreateAH to %v: %v", gid, err)
	}
	t.Cleanup(func() { check(t, "Destroy AH", ah.Destroy()) })
	postRecv(t, qb1, verbs.RecvWR{WRID: 1, SGList: b.sge(0, 40+256)}, verbs.RecvWR{WRID: 3, SGList: b.sge(2048, 40+256)})
	postRecv(t, qb2, verbs.RecvWR{WRID: 2, SGList: b.sge(1024, 40+256)})
	fill(a.buf[:256], 21)
	send := func(wrid uint64) {
		post(t, qa, verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.sge(0, 256),
			AH: ah, RemoteQPN: mcastQPN, RemoteQKey: qkey})
		expect(t, waitWC(t, env, a.scq, 1)[0], wrid, verbs.WCSuccess, verbs.WCSend)
	}
	send(10)
	got := map[uint32]uint64{}
	for _, wc := range waitWC(t, env, b.rcq, 2) {
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+256 || wc.SrcQP != qa.Num() || wc.Flags&verbs.WCFlagGRH == 0 {
			t.Errorf("multicast receive %+v: want 296 bytes from QP %#x with a GRH", wc, qa.Num())
		}
		got[wc.QPNum] = wc.WRID
	}
	if got[qb1.Num()] != 1 || got[qb2.Num()] != 2 {
		t.Fatalf("receives by QP %v: want wr_id 1 on QP %#x and 2 on QP %#x", got, qb1.Num(), qb2.Num())
	}
	for _, off := range []int{0, 1024} {
		if g := mcastGRHDst(b.buf[off : off+40]); g != gid.Addr() {
			t.Errorf("GRH at %d names %v as destination, want the group %v", off, g, gid.Addr())
		}
		if string(b.buf[off+40:off+40+256]) != string(a.buf[:256]) {
			t.Errorf("multicast data at %d differ", off)
		}
	}
	check(t, "detach 2", qb2.(verbs.McastAttacher).DetachMcast(gid, 0))
	postRecv(t, qb2, verbs.RecvWR{WRID: 4, SGList: b.sge(3072, 40+256)})
	send(11)
	if wc := waitWC(t, env, b.rcq, 1)[0]; wc.WRID != 3 || wc.QPNum != qb1.Num() {
		t.Errorf("after QP %#x detached: %+v, want wr_id 3 on QP %#x alone", qb2.Num(), wc, qb1.Num())
	}
	check(t, "detach 1", qb1.(verbs.McastAttacher).DetachMcast(gid, 0))
}

// mcastGRHDst is the destination address of a received GRH area: the IPv6
// header's, or the IPv4 header's in its last 20 bytes.
func mcastGRHDst(g []byte) netip.Addr {
	if g[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(g[24:40]))
	}
	return netip.AddrFrom4([4]byte(g[36:40]))
}

// toRTSUD brings a UD QP to RTS with the Q_Key.
func toRTSUD(t *testing.T, env *Env, qp verbs.QP, qkey uint32) {
	t.Helper()
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: env.Port, QKey: qkey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("UD QP to %v: %v", s.attr.State, err)
		}
	}
}
