//go:build linux && cgo && ibverbs

package ibverbs_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/provider/ibverbs"
	"github.com/goroce/goroce/verbs"
)

// deviceAddr returns the device's IPv4 address (its RoCE v2 GID's).
func deviceAddr(t *testing.T) (verbs.Device, netip.Addr) {
	ctx, gidx := device(t)
	e, err := ctx.QueryGIDEntry(1, gidx)
	if err != nil || !e.Addr.Is4() {
		t.Skipf("%s has no IPv4 RoCE v2 GID (%v): rdma_cm needs an address", ctx.Device().Name(), err)
	}
	return ctx.Device(), e.Addr
}

// TestCMDialAccept: rdmacm's Dial and Accept (DialConn, AcceptConn) on the
// ibverbs provider, through librdmacm and the kernel's rdma_cm, between two
// connections on the device: the memory offers, an RDMA WRITE and a SEND
// arrive, Close ends both sides; a dial to a port nobody listens on is
// refused with REJ 8.
func TestCMDialAccept(t *testing.T) {
	dev, addr := deviceAddr(t)
	if _, ok := dev.(*ibverbs.Device); !ok {
		t.Fatalf("device %T", dev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, dev, addr.String()+":7490")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{MemSize: 4096 + 64, Recvs: 1, RecvSize: 64})
		if err != nil {
			done <- result{err: err}
			return
		}
		wc, err := c.Wait(ctx)
		got := string(c.Mem()[:5]) + " " + string(c.Received(wc))
		<-c.Done() // the dialer closes
		c.Close()
		done <- result{got, err}
	}()
	c, err := rdmacm.DialConn(ctx, dev, addr.String()+":7490", nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(c.Mem(), "hello, server")
	r := c.Remote()
	if r.Length != 4096 {
		t.Fatalf("the listener offered %+v", r)
	}
	if err := c.Post(ctx,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: c.SGE(0, 5), RemoteAddr: r.Addr, RKey: r.RKey},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: c.SGE(7, 6)}); err != nil {
		t.Fatal(err)
	}
	if wc, err := c.Wait(ctx); err != nil || wc.WRID != 2 {
		t.Fatalf("the SEND: %+v %v", wc, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.got != "hello server" {
		t.Fatalf("the listener got %q, %v", res.got, res.err)
	}

	// Nobody listens on 7491.
	_, err = rdmacm.DialConn(ctx, dev, addr.String()+":7491", nil)
	var rej *rdmacm.RejectError
	if !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID || !errors.Is(err, rdmacm.ErrRefused) {
		t.Fatalf("dial to no listener: %v", err)
	}
	t.Logf("refused: %v", err)
}
