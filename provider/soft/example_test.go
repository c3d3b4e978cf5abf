package soft_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Example writes 16 bytes into a peer's memory with RDMA WRITE. Two soft
// devices are joined by an in-memory packet path here; with udp.Listen in
// place of pipe.New they talk RoCEv2 over the network (and between two
// processes, cm.DialEndpoint and cm.AcceptEndpoint swap the Endpoints).
func Example() {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	var sets []*verbs.QPSet
	for i, conn := range []*pipe.Conn{ca, cb} {
		dev, err := soft.New(soft.Options{Name: fmt.Sprint("soft", i), Conn: conn})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()
		ctx, err := dev.Open()
		if err != nil {
			log.Fatal(err)
		}
		defer ctx.Close()
		// A PD, a completion channel and CQ, 4 KiB of memory and an RC QP.
		set, err := verbs.NewQPSet(ctx, verbs.QPTRC, make([]byte, 4096), nil)
		if err != nil {
			log.Fatal(err)
		}
		sets = append(sets, set)
	}
	a, b := sets[0], sets[1]

	// RESET -> INIT -> RTR -> RTS, each QP aimed at the other: what an
	// out-of-band exchange of the Endpoints (QPN, PSN, GID, rkey, address)
	// sets up.
	for _, p := range [][2]*verbs.QPSet{{a, b}, {b, a}} {
		if err := verbs.Connect(p[0].QP, p[0].Endpoint, p[1].Endpoint, nil); err != nil {
			log.Fatal(err)
		}
	}

	copy(a.MR.Buf(), "hello, RDMA world")
	_, err := a.QP.PostSend([]verbs.SendWR{{
		WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: a.SGE(0, 16), RemoteAddr: b.Endpoint.Addr, RKey: b.Endpoint.RKey,
	}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := a.Wait(ctx, wc); err != nil { // poll, arm, poll, wait on the channel
		log.Fatal(err)
	}
	b.QP.Query() // orders B's device's write before this goroutine's read (race detector)
	fmt.Println(wc[0].Status, wc[0].Opcode, string(b.MR.Buf()[:16]))
	// Output: SUCCESS RDMA_WRITE hello, RDMA worl
}
