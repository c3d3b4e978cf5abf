//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// TestRefuse: a request a listener refuses (Request.Refuse) is answered as
// by no listener, REJ 8: a plain dial fails with it, and a dial that waits
// for a listener (RetryRefused) asks again and is accepted by the next
// listener on the address, once the refusing one has closed.
func TestRefuse(t *testing.T) {
	devA, devB := newDev(t, "127.0.10.30"), newDev(t, "127.0.10.31")
	a, b := newSide(t, devA), newSide(t, devB)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7180")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if req, err := l.Accept(ctx); err == nil {
			req.Refuse()
		}
	}()
	_, err = rdmacm.Dial(ctx, devA, "127.0.10.31:7180", a.qp, rdmacm.DialOptions{})
	var rej *rdmacm.RejectError
	if !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID {
		t.Fatalf("dial refused by the listener: %v, want REJ %d", err, ib.RejInvalidServiceID)
	}
	a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)

	// The first listener refuses and closes; the second, on the same
	// address, takes the same dial.
	refused := make(chan struct{})
	go func() {
		if req, err := l.Accept(ctx); err == nil {
			req.Refuse()
		}
		l.Close()
		close(refused)
	}()
	accepted := make(chan error, 1)
	go func() {
		<-refused
		l2, err := rdmacm.Listen(ctx, devB, ":7180")
		if err != nil {
			accepted <- err
			return
		}
		defer l2.Close()
		req, err := l2.Accept(ctx)
		if err == nil {
			_, err = req.Accept(ctx, b.qp, rdmacm.AcceptOptions{})
		}
		accepted <- err
	}()
	c, err := rdmacm.Dial(ctx, devA, "127.0.10.31:7180", a.qp, rdmacm.DialOptions{RetryRefused: 5 * time.Second})
	if err != nil {
		t.Fatalf("dial waiting for a listener: %v", err)
	}
	defer c.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("the second listener: %v", err)
	}
	select {
	case <-refused:
	default:
		t.Fatal("the dial was accepted before the first listener refused it")
	}
}
