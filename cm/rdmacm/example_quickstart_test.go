//go:build linux

package rdmacm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Example_quickStart is the README's quick start: two soft devices over UDP
// on loopback, an rdma_cm connection between them and one RDMA WRITE into
// memory the listener offers in its private data.
func Example_quickStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.11", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()
	client, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.12", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	open := func(dev *soft.Device) (verbs.PD, verbs.CQ, verbs.QP) {
		vc, _ := dev.Open()
		pd, _ := vc.AllocPD()
		cq, _ := vc.CreateCQ(16, nil)
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return pd, cq, qp
	}

	// The listener offers 64 bytes to write into.
	spd, _, sqp := open(server)
	target, _ := spd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	l, err := rdmacm.Listen(ctx, server, ":7470")
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
		where := rdmacm.RemoteBufferOf(target).AppendBinary(nil)
		conn, _ := req.Accept(ctx, sqp, rdmacm.AcceptOptions{PrivateData: where})
		accepted <- conn
	}()

	// The dialer connects and writes.
	cpd, ccq, cqp := open(client)
	conn, err := rdmacm.Dial(ctx, client, "127.0.20.11:7470", cqp, rdmacm.DialOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	peer := <-accepted
	var rb rdmacm.RemoteBuffer
	if err := rb.UnmarshalBinary(conn.PeerPrivateData()); err != nil {
		fmt.Println(err)
		return
	}
	src, _ := cpd.RegMR([]byte("hello over rdma_cm"), verbs.AccessLocalWrite)
	cqp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList:     []verbs.SGE{{Addr: src.Addr(), Length: 18, LKey: src.LKey()}},
		RemoteAddr: rb.Addr, RKey: rb.RKey}})
	wc := make([]verbs.WC, 1)
	for ccq.Poll(wc) == 0 && ctx.Err() == nil {
	}
	fmt.Println(wc[0].Err())

	conn.Close() // DREQ: the listener's side sees it
	<-peer.Done()
	fmt.Println(string(target.Buf()[:18]))
	// Output:
	// <nil>
	// hello over rdma_cm
}
