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

// serve is a server program: a soft device, a listener, one connection
// whose memory the client may write (offered in the REP) with a receive
// posted; it returns what the client's WRITE and SEND left there.
func serve(ctx context.Context, addr, listen string) (string, error) {
	dev, _, err := soft.Open(soft.OpenOptions{Addr: addr, Path: "udp"})
	if err != nil {
		return "", err
	}
	defer dev.Close()
	l, err := rdmacm.Listen(ctx, dev, listen)
	if err != nil {
		return "", err
	}
	defer l.Close()
	c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{MemSize: 128, Recvs: 1, RecvSize: 64})
	if err != nil {
		return "", err
	}
	defer c.Close()        // disconnects, then frees the QP, MR, CQ, channel, PD
	wc, err := c.Wait(ctx) // the SEND, which the WRITE before it preceded
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("WRITE %q, SEND %q", c.Mem()[:13], c.Received(wc)), nil
}

// dial is the client program: it connects (asking again for a second if
// the server's device is up but not yet listening), WRITEs into the memory
// the server offered, then SENDs, and waits for the SEND's completion.
func dial(ctx context.Context, addr, server string) error {
	dev, _, err := soft.Open(soft.OpenOptions{Addr: addr, Path: "udp"})
	if err != nil {
		return err
	}
	defer dev.Close()
	c, err := rdmacm.DialConn(ctx, dev, server, &rdmacm.ConnOptions{Dial: rdmacm.DialOptions{RetryRefused: time.Second}})
	if err != nil {
		return err
	}
	defer c.Close()
	copy(c.Mem(), "hello, WRITE!hello, SEND!")
	r := c.Remote()
	if err := c.Post(ctx,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: c.SGE(0, 13), RemoteAddr: r.Addr, RKey: r.RKey},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: c.SGE(13, 12)}); err != nil {
		return err
	}
	_, err = c.Wait(ctx) // the SEND's completion (RC: the WRITE is done too)
	return err
}

// ExampleDialConn runs a server and a client, each the whole program from
// opening its device to closing its connection (TestTwoProcessesNetns
// runs the same two as two processes in two network namespaces and checks
// that neither leaves anything behind).
func ExampleDialConn() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := serve(ctx, "127.0.20.31", ":7472")
		done <- result{got, err}
	}()
	fmt.Println("client:", dial(ctx, "127.0.20.32", "127.0.20.31:7472"))
	r := <-done
	fmt.Println("server:", r.got, r.err)
	// Output:
	// client: <nil>
	// server: WRITE "hello, WRITE!", SEND "hello, SEND!" <nil>
}
