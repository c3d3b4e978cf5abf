package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// ExamplePollWait waits for completions without spinning: a goroutine
// blocks in PollWait (poll, arm the CQ, poll again, wait on its channel)
// until a SEND arrives; closing the context wakes it with ErrDestroyed.
func ExamplePollWait() {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	var ctxs [2]verbs.Context
	var sets [2]*verbs.QPSet
	for i, conn := range []*pipe.Conn{ca, cb} {
		dev, err := soft.New(soft.Options{Name: fmt.Sprint("soft", i), Conn: conn})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()
		if ctxs[i], err = dev.Open(); err != nil {
			log.Fatal(err)
		}
		if sets[i], err = verbs.NewQPSet(ctxs[i], verbs.QPTRC, make([]byte, 4096), nil); err != nil {
			log.Fatal(err)
		}
	}
	a, b := sets[0], sets[1]
	if err := errors.Join(verbs.Connect(a.QP, a.Endpoint, b.Endpoint, nil), verbs.Connect(b.QP, b.Endpoint, a.Endpoint, nil)); err != nil {
		log.Fatal(err)
	}

	got := make(chan string)
	go func() { // the receiver: blocks until completions come, then until the close
		wc := make([]verbs.WC, 4)
		for {
			n, err := b.Wait(context.Background(), wc) // verbs.PollWait(ctx, b.Chan, b.CQ, wc)
			if err != nil {
				got <- fmt.Sprint("wait ended: destroyed ", errors.Is(err, verbs.ErrDestroyed))
				return
			}
			for _, c := range wc[:n] {
				got <- fmt.Sprintf("%v %v of %d bytes", c.Opcode, c.Status, c.ByteLen)
			}
		}
	}()
	if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGList: a.SGE(0, 32)}}); err != nil { // unsignaled
		log.Fatal(err)
	}
	fmt.Println(<-got)
	ctxs[1].Close() // wakes the receiver
	fmt.Println(<-got)
	// Output:
	// RECV SUCCESS of 32 bytes
	// wait ended: destroyed true
}
