//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/provider/soft"
)

// A RemoteBuffer travels in private data as 16 bytes.
func ExampleRemoteBuffer() {
	b := rdmacm.RemoteBuffer{Addr: 0x7f0000001000, RKey: 0x1234, Length: 4096}
	wire := b.AppendBinary([]byte("hdr:"))
	var got rdmacm.RemoteBuffer
	err := got.UnmarshalBinary(wire[4:])
	fmt.Printf("%d bytes, %+v %v\n", len(wire)-4, got, err)
	part, ok := got.Slice(1024, 512)
	fmt.Printf("%#x %d %v\n", part.Addr, part.Length, ok)
	// Output:
	// 16 bytes, {Addr:139637976731648 RKey:4660 Length:4096} <nil>
	// 0x7f0000001400 512 true
}

// AcceptConn accepts with the objects it builds; private data arrives as
// long as it was sent, after the memory offer (here the listener offers
// none: NoOffer).
func ExampleListener_AcceptConn() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.51", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()
	client, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.52", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	l, err := rdmacm.Listen(ctx, server, ":7474")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() {
		c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{NoOffer: true, PrivateData: []byte("welcome")})
		if err == nil {
			fmt.Printf("server: %q\n", c.PeerPrivateData())
			<-c.Done() // the client closes
			c.Close()
		}
	}()
	c, err := rdmacm.DialConn(ctx, client, "127.0.20.51:7474", &rdmacm.ConnOptions{PrivateData: []byte("hi")})
	if err != nil {
		fmt.Println(err)
		return
	}
	time.Sleep(10 * time.Millisecond) // the server's line first
	fmt.Printf("client: %q, offered %d bytes\n", c.PeerPrivateData(), c.Remote().Length)
	c.Close()
	// Output:
	// server: "hi"
	// client: "welcome", offered 0 bytes
}

// A dial to a host with no RoCE device fails within a second, saying why.
func ExamplePathError() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, _, err := soft.Open(soft.OpenOptions{Addr: "127.0.20.61", Path: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	_, err = rdmacm.DialConn(ctx, client, "127.0.20.62:7474", nil) // nothing there
	var pe *rdmacm.PathError
	fmt.Println(errors.As(err, &pe), pe.ICMP, errors.Is(err, rdmacm.ErrUnreachable), errors.Is(err, syscall.ECONNREFUSED))
	// Output: true true true true
}
