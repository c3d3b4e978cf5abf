package soft

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/verbs"
)

// TestPortMTU: rdma_rxe's arithmetic (eth_mtu_int_to_enum: the largest IB
// MTU not above the link's MTU less 80 bytes, at least 256).
func TestPortMTU(t *testing.T) {
	for _, c := range []struct {
		linkMTU int
		want    verbs.MTU
	}{
		{0, 0}, {-1, 0}, {1500, verbs.MTU1024}, {1400, verbs.MTU1024}, {1000, verbs.MTU512}, {9000, verbs.MTU4096},
		{65536, verbs.MTU4096}, {4096 + 80, verbs.MTU4096}, {4096 + 79, verbs.MTU2048}, {2048 + 80, verbs.MTU2048},
		{2048 + 79, verbs.MTU1024}, {1024 + 80, verbs.MTU1024}, {1024 + 79, verbs.MTU512}, {300, verbs.MTU256}, {68, verbs.MTU256},
	} {
		if got := PortMTU(c.linkMTU); got != c.want {
			t.Errorf("PortMTU(%d) = %v, want %v", c.linkMTU, got, c.want)
		}
	}
}

// TestActiveMTUFromPath: on a path that is no interface's (the in-memory
// pipe), the active MTU is the largest the path's packets carry; a larger
// Options.ActiveMTU is refused; a QP cannot take a path MTU above the
// port's, and the error names both.
func TestActiveMTUFromPath(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.3.1"), netip.MustParseAddr("10.0.3.2"), pipe.Options{MaxPacket: 2048 + 100})
	defer cb.Close()
	if _, err := New(Options{Conn: ca, ActiveMTU: verbs.MTU4096}); !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "4096") {
		t.Errorf("ActiveMTU 4096 on a path of 2148-byte packets: %v, want ErrInvalidAttr naming 4096", err)
	}
	d, err := New(Options{Conn: ca})
	must(t, err)
	defer d.Close()
	ctx, err := d.Open()
	must(t, err)
	pa, err := ctx.QueryPort(1)
	must(t, err)
	if pa.ActiveMTU != verbs.MTU2048 {
		t.Fatalf("ActiveMTU %v on a path of 2148-byte packets, want 2048", pa.ActiveMTU)
	}
	pd, err := ctx.AllocPD()
	must(t, err)
	cq, err := ctx.CreateCQ(4, nil)
	must(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags))
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU4096, DestQPN: 1,
		AHAttr: verbs.AHAttr{SGIDIndex: verbs.DefaultGIDIndex, DGID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.3.2"))}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "path MTU 4096") || !strings.Contains(err.Error(), "active MTU 2048") {
		t.Errorf("RTR with path MTU 4096 on a 2048 port: %v, want ErrInvalidAttr naming both", err)
	}
	if at, err := qp.Query(); err != nil || at.State != verbs.QPSInit {
		t.Errorf("after the refused RTR: %v, %v; want INIT", at.State, err)
	}
}
