//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// TestOwnedConn: DialConn and AcceptConn build the objects, offer memory
// both ways (exactly the offered part), carry the application's private
// data exactly, and Close destroys every object, on both sides, whoever
// closes first; a bad option fails the dial before any REQ.
func TestOwnedConn(t *testing.T) {
	devA, devB := newDev(t, "127.0.21.11"), newDev(t, "127.0.21.12")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7480")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *rdmacm.Conn, 1)
	go func() {
		c, err := l.AcceptConn(ctx, &rdmacm.ConnOptions{MemSize: 8192, Recvs: 2, RecvSize: 1024, PrivateData: []byte("rep")})
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	a, err := rdmacm.DialConn(ctx, devA, "127.0.21.12:7480", &rdmacm.ConnOptions{MemSize: 4096, PrivateData: []byte("request")})
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.FailNow()
	}
	if string(a.PeerPrivateData()) != "rep" || string(b.PeerPrivateData()) != "request" {
		t.Errorf("private data: %q, %q", a.PeerPrivateData(), b.PeerPrivateData())
	}
	if ra, rb := a.Remote(), b.Remote(); ra.Length != 8192-2*1024 || rb.Length != 4096 ||
		ra.RKey != b.Set().MR.RKey() || rb.Addr != a.Set().MR.Addr() || len(b.Mem()) != 6144 {
		t.Errorf("offers: %+v, %+v", ra, rb)
	}
	// A READ of the server's offered memory works with what the offer says.
	copy(b.Mem(), "offered")
	b.Set().QP.Query() // the server's memory before the READ, for the race detector
	r := a.Remote()
	if err := a.Post(ctx, verbs.SendWR{WRID: 7, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: a.SGE(0, 7), RemoteAddr: r.Addr, RKey: r.RKey}); err != nil {
		t.Fatal(err)
	}
	if wc, err := a.Wait(ctx); err != nil || wc.WRID != 7 || string(a.Mem()[:7]) != "offered" {
		t.Fatalf("READ: %+v %v %q", wc, err, a.Mem()[:7])
	}
	sa, sb := a.Set(), b.Set()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range []*verbs.QPSet{sa, sb} {
		if _, err := s.QP.Query(); !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("side %d: the QP after Close: %v", i, err)
		}
		if err := s.CQ.Err(); !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("side %d: the CQ after Close: %v", i, err)
		}
		if _, err := s.PD.RegMR(make([]byte, 8), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("side %d: the PD after Close: %v", i, err)
		}
	}
	if _, err := a.Wait(ctx); err == nil {
		t.Error("Wait on a closed connection")
	}
	// Too many receives for the memory: refused before a REQ leaves.
	_, err = rdmacm.DialConn(ctx, devA, "127.0.21.12:7480", &rdmacm.ConnOptions{MemSize: 100, Recvs: 2, RecvSize: 64})
	if !errors.Is(err, verbs.ErrInvalidAttr) {
		t.Errorf("receives past the memory: %v", err)
	}
	if s := rdmacm.Attach(devA, rdmacm.MachineConfig{}).Stats(); s.Machine.Sent != 3 { // REQ, RTU, DREQ
		t.Errorf("MADs sent: %d", s.Machine.Sent)
	}
}
