//go:build linux

package rdmacm_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Example connects two soft devices over UDP on loopback with rdma_cm and
// writes into the listener's memory with one RDMA WRITE: the listener tells
// the dialer where, in the REP's private data.
func Example() {
	open := func(addr string) (*soft.Device, verbs.PD, verbs.CQ, verbs.QP) {
		conn, _ := udp.Listen(netip.MustParseAddr(addr), udp.Options{})
		dev, _ := soft.New(soft.Options{Conn: conn})
		ctx, _ := dev.Open()
		pd, _ := ctx.AllocPD()
		cq, _ := ctx.CreateCQ(16, nil)
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return dev, pd, cq, qp
	}
	server, spd, _, sqp := open("127.0.20.1")
	client, cpd, ccq, cqp := open("127.0.20.2")
	defer server.Close()
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The listener: accept one connection, offering 64 bytes to write into.
	target, _ := spd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	l, err := rdmacm.Listen(ctx, server, ":7471")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	accepted := make(chan *rdmacm.Conn, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			accepted <- nil
			return
		}
		var where [12]byte
		binary.BigEndian.PutUint64(where[:], target.Addr())
		binary.BigEndian.PutUint32(where[8:], target.RKey())
		conn, _ := req.Accept(ctx, sqp, rdmacm.AcceptOptions{PrivateData: where[:]})
		accepted <- conn
	}()

	// The dialer: connect, then write.
	conn, err := rdmacm.Dial(ctx, client, "127.0.20.1:7471", cqp, rdmacm.DialOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	peer := <-accepted
	where := conn.PeerPrivateData()
	src, _ := cpd.RegMR([]byte("hello over rdma_cm"), verbs.AccessLocalWrite)
	cqp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: src.Addr(), Length: 18, LKey: src.LKey()}},
		RemoteAddr: binary.BigEndian.Uint64(where), RKey: binary.BigEndian.Uint32(where[8:])}})
	wc := make([]verbs.WC, 1)
	for ccq.Poll(wc) == 0 && ctx.Err() == nil {
	}
	fmt.Println(wc[0].Status)

	conn.Close() // DREQ; the listener's side sees it
	<-peer.Done()
	fmt.Println(peer.Err())
	// The listener reads what was written once it knows the writer is done
	// (here: it disconnected).
	fmt.Println(string(target.Buf()[:18]))
	// Output:
	// SUCCESS
	// rdmacm: disconnected by peer
	// hello over rdma_cm
}
