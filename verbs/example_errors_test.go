package verbs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// A failed completion is an error matching its status's sentinel.
func ExampleWC_Err() {
	wc := verbs.WC{WRID: 7, Status: verbs.WCRemAccessErr}
	err := wc.Err()
	fmt.Println(errors.Is(err, verbs.ErrRemoteAccess), err)
	var se *verbs.StatusError
	fmt.Println(errors.As(err, &se), se.Status)
	fmt.Println((&verbs.WC{Status: verbs.WCSuccess}).Err())
	// Output:
	// true verbs: remote access error (REM_ACCESS_ERR)
	// true REM_ACCESS_ERR
	// <nil>
}

// The zero SendWR and requests for remote memory without an rkey are
// refused before they reach the peer.
func ExampleCheckSendWRs() {
	n, err := verbs.CheckSendWRs([]verbs.SendWR{{Opcode: verbs.WRSend}, {}})
	fmt.Println(n, errors.Is(err, verbs.ErrInvalidWR))
	n, err = verbs.CheckSendWRs([]verbs.SendWR{{Opcode: verbs.WRRDMARead, RemoteAddr: 0x1000}})
	fmt.Println(n, err)
	// Output:
	// 1 true
	// 0 verbs: SendWR 0x0: RDMA_READ without an RKey (RKey 0 names no memory region: the peer would fail the QP): verbs: invalid work request
}

// pair makes two soft devices joined in memory with a connected RC QPSet
// each (4 KiB of memory, a send queue of depth).
func pair(depth uint32) (a, b *verbs.QPSet, closeAll func()) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	var sets [2]*verbs.QPSet
	var devs [2]*soft.Device
	for i, conn := range []*pipe.Conn{ca, cb} {
		dev, err := soft.New(soft.Options{Conn: conn})
		if err != nil {
			log.Fatal(err)
		}
		devs[i] = dev
		ctx, err := dev.Open()
		if err != nil {
			log.Fatal(err)
		}
		opts := &verbs.QPSetOptions{Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
		if sets[i], err = verbs.NewQPSet(ctx, verbs.QPTRC, make([]byte, 4096), opts); err != nil {
			log.Fatal(err)
		}
	}
	for _, p := range [][2]*verbs.QPSet{{sets[0], sets[1]}, {sets[1], sets[0]}} {
		if err := verbs.Connect(p[0].QP, p[0].Endpoint, p[1].Endpoint, nil); err != nil {
			log.Fatal(err)
		}
	}
	return sets[0], sets[1], func() { devs[0].Close(); devs[1].Close() }
}

// PostSendContext waits for room in a full send queue: here 8 SENDs on a
// queue of 2, which B's receives, posted a moment later, let through.
func ExamplePostSendContext() {
	a, b, closeAll := pair(2)
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(10 * time.Millisecond)
		for i := 0; i < 8; i++ {
			b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: b.SGE(i*64, 64)}})
		}
	}()
	wrs := make([]verbs.SendWR, 8)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: a.SGE(0, 64)}
	}
	posted, err := verbs.PostSendContext(ctx, a.QP, wrs) // the first two at once, then as SENDs complete
	fmt.Println(posted, err)
	// Output: 8 <nil>
}

// PollWait returns a CQ's fatal error (CQ.Err) rather than waiting on.
func ExamplePollWait_destroyed() {
	a, _, closeAll := pair(4)
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		time.Sleep(10 * time.Millisecond)
		a.QP.Destroy()
		a.CQ.Destroy() // under the waiter
	}()
	_, err := verbs.PollWait(ctx, a.Chan, a.CQ, make([]verbs.WC, 1))
	fmt.Println(errors.Is(err, verbs.ErrDestroyed), errors.Is(a.CQ.Err(), verbs.ErrDestroyed))
	// Output: true true
}

// A status's error, without a WC.
func ExampleWCStatus_Err() {
	fmt.Println(verbs.WCRetryExcErr.Err(), errors.Is(verbs.WCWRFlushErr.Err(), verbs.ErrFlushed))
	// Output: verbs: transport retry counter exceeded (RETRY_EXC_ERR) true
}

// The opcodes that reach remote memory need an rkey.
func ExampleWROpcode_NeedsRKey() {
	for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd} {
		fmt.Println(op, op.NeedsRKey())
	}
	// Output:
	// SEND false
	// RDMA_WRITE true
	// RDMA_READ true
	// ATOMIC_FETCH_AND_ADD true
}
