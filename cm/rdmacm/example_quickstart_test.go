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
// on loopback, an rdma_cm connection between them whose verbs objects the
// connection owns, an RDMA WRITE into the memory the server offered and a
// SEND into the receive it posted.
func Example_quickStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.11", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()
	l, err := rdmacm.Listen(ctx, server, ":7470")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() { // the server: one connection, one receive posted
		c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{Recvs: 1})
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()        // disconnects, then destroys the QP, MR, CQ, channel and PD
		wc, err := c.Wait(ctx) // the SEND, which followed the WRITE
		got <- fmt.Sprintf("%q %q %v", c.Mem()[:5], c.Received(wc), err)
	}()

	client, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.12", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	c, err := rdmacm.DialConn(ctx, client, "127.0.20.11:7470", nil) // PD, CQ, 64 KiB MR, QP
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	copy(c.Mem(), "hello, server")
	r := c.Remote() // the memory the server offered
	err = c.Post(ctx,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: c.SGE(0, 5), RemoteAddr: r.Addr, RKey: r.RKey},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: c.SGE(7, 6)})
	if err != nil {
		fmt.Println(err)
		return
	}
	wc, err := c.Wait(ctx)
	fmt.Println("client:", wc.WRID, err)
	fmt.Println("server:", <-got)
	// Output:
	// client: 2 <nil>
	// server: "hello" "server" <nil>
}
