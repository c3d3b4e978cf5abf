package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net/netip"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Example_operations: SEND with immediate, WRITE, READ and atomics between
// two soft devices joined in memory, waiting on completion channels.
func Example_operations() {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	var sets [2]*verbs.QPSet // each a PD, a channel, a CQ, 4 KiB of memory and an RC QP
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
		defer ctx.Close() // destroys what is left of the context's objects
		if sets[i], err = verbs.NewQPSet(ctx, verbs.QPTRC, make([]byte, 4096), nil); err != nil {
			log.Fatal(err)
		}
	}
	a, b := sets[0], sets[1]
	for _, p := range [][2]*verbs.QPSet{{a, b}, {b, a}} { // each QP to RTS toward the other
		if err := verbs.Connect(p[0].QP, p[0].Endpoint, p[1].Endpoint, nil); err != nil {
			log.Fatal(err)
		}
	}
	wc := make([]verbs.WC, 1)
	do := func(wr verbs.SendWR) verbs.WCStatus { // post on A and wait for its completion
		wr.Flags |= verbs.SendSignaled
		_, err := a.QP.PostSend([]verbs.SendWR{wr})
		if err == nil {
			_, err = a.Wait(context.Background(), wc)
		}
		if err != nil {
			log.Fatal(err)
		}
		return wc[0].Status
	}

	// SEND with immediate into a receive B posted.
	if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 7, SGList: b.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	copy(a.MR.Buf(), "hello")
	fmt.Println("send:", do(verbs.SendWR{Opcode: verbs.WRSendWithImm, SGList: a.SGE(0, 5), Imm: 42}))
	if _, err := b.Wait(context.Background(), wc); err != nil { // the receive's completion
		log.Fatal(err)
	}
	fmt.Printf("B received %q, immediate %d\n", b.MR.Buf()[:wc[0].ByteLen], wc[0].Imm)

	// WRITE into the memory B exposed in its Endpoint, and READ it back.
	copy(a.MR.Buf()[100:], "written")
	do(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: a.SGE(100, 7), RemoteAddr: b.Endpoint.Addr + 200, RKey: b.Endpoint.RKey})
	do(verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: a.SGE(300, 7), RemoteAddr: b.Endpoint.Addr + 200, RKey: b.Endpoint.RKey})
	fmt.Printf("read back %q\n", a.MR.Buf()[300:307])

	// Atomics on a word of B (host byte order); the original lands in A's memory.
	word := b.Endpoint.Addr + 512
	do(verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: a.SGE(400, 8), RemoteAddr: word, RKey: b.Endpoint.RKey, CompareAdd: 5})
	do(verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: a.SGE(408, 8), RemoteAddr: word, RKey: b.Endpoint.RKey, CompareAdd: 5, Swap: 100})
	b.QP.Query() // orders B's device's write before this goroutine's read (for the race detector)
	fmt.Println("fetched", binary.NativeEndian.Uint64(a.MR.Buf()[400:]), "and", binary.NativeEndian.Uint64(a.MR.Buf()[408:]),
		"; the word is", binary.NativeEndian.Uint64(b.MR.Buf()[512:]))
	// Output:
	// send: SUCCESS
	// B received "hello", immediate 42
	// read back "written"
	// fetched 0 and 5 ; the word is 100
}
