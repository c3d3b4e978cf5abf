//go:build linux && cgo && ibverbs

package ibverbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// TestPollWaitCQDestroyed: destroying a CQ under a PollWait waiter makes it
// return an error matching verbs.ErrDestroyed within 100 ms, and CQ.Err
// says the same.
func TestPollWaitCQDestroyed(t *testing.T) {
	ctx, _ := device(t)
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Destroy()
	cq, err := ctx.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Err(); err != nil {
		t.Fatalf("a new CQ has an error: %v", err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := verbs.PollWait(wctx, ch, cq, make([]verbs.WC, 1))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if d := time.Since(start); !errors.Is(err, verbs.ErrDestroyed) || d > 100*time.Millisecond {
			t.Fatalf("PollWait returned %v after %v, want ErrDestroyed within 100 ms", err, d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PollWait still waits 5 s after its CQ was destroyed")
	}
	if err := cq.Err(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("CQ.Err after Destroy: %v", err)
	}
}
