//go:build linux

package rdmacm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/ib"
	"github.com/goroce/goroce/cm/rdmacm"
)

// TestRefusedByDeviceWithoutManager: a dial to a device that never called
// Listen (no connection manager runs on it) is refused with REJ 8 within
// 50 ms, as Linux's ib_cm refuses it, and the device is left as it was.
func TestRefusedByDeviceWithoutManager(t *testing.T) {
	devA, devB := newDev(t, "127.0.21.1"), newDev(t, "127.0.21.2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 5; i++ {
		a := newSide(t, devA)
		start := time.Now()
		_, err := rdmacm.Dial(ctx, devA, "127.0.21.2:7174", a.qp, rdmacm.DialOptions{})
		d := time.Since(start)
		var rej *rdmacm.RejectError
		if !errors.As(err, &rej) || rej.Reason != ib.RejInvalidServiceID || !errors.Is(err, rdmacm.ErrRefused) {
			t.Fatalf("dial %d: %v, want REJ reason 8", i, err)
		}
		if d > 50*time.Millisecond {
			t.Fatalf("dial %d refused after %v, want within 50 ms", i, d)
		}
		t.Logf("dial %d: %v after %v", i, err, d)
	}
	if s := devB.GSIStats(); s.TxMADs != 5 || s.RxMADs != 5 {
		t.Errorf("the device without a manager: %+v, want 5 REQs in, 5 REJs out", s)
	}
}
