package soft_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Example writes 16 bytes into a peer's memory with RDMA WRITE. Two soft
// devices are joined by an in-memory packet path here; with udp.Listen in
// place of pipe.New they talk RoCEv2 over the network.
func Example() {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	devA, _ := soft.New(soft.Options{Name: "soft0", Conn: ca})
	devB, _ := soft.New(soft.Options{Name: "soft1", Conn: cb})
	defer devA.Close()
	defer devB.Close()

	type end struct {
		qp  verbs.QP
		cq  verbs.CQ
		mr  verbs.MR
		gid verbs.GID
	}
	open := func(d *soft.Device) end {
		ctx, _ := d.Open()
		pd, _ := ctx.AllocPD()
		cq, _ := ctx.CreateCQ(16, nil)
		mr, _ := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		gid, _ := ctx.QueryGID(1, 0)
		return end{qp, cq, mr, gid}
	}
	a, b := open(devA), open(devB)

	// RESET -> INIT -> RTR -> RTS, each QP aimed at the other (what an
	// out-of-band exchange of QPN, PSN and GID sets up).
	for _, p := range [][2]end{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.Num(), RQPSN: 0,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AHAttr: verbs.AHAttr{DGID: peer.gid}},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
		me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	}

	copy(a.mr.Buf(), "hello, RDMA world")
	_, err := a.qp.PostSend([]verbs.SendWR{{
		WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: a.mr.Addr(), Length: 16, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(5 * time.Second); a.cq.Poll(wc) == 0 && time.Now().Before(deadline); {
	}
	fmt.Println(wc[0].Status, wc[0].Opcode, string(b.mr.Buf()[:16]))
	// Output: SUCCESS RDMA_WRITE hello, RDMA worl
}
