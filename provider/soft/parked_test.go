//go:build linux

package soft

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
)

// TestDriverParked: an idle device's driver parks in the packet path once
// its spin is over (DriverParked); a Poll of an empty CQ after Active wakes
// it to spin, and while the application keeps reporting activity more
// often than the spin lasts, it never parks again; left alone, it parks.
func TestDriverParked(t *testing.T) {
	ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
	t.Cleanup(func() { cb.Close() })
	const spin = 100 * time.Millisecond
	d, err := New(Options{Name: "park", Conn: ca, Spin: spin})
	e2eMust(t, err)
	t.Cleanup(func() { d.Close() })
	cq := e2eNewRes(t, d, 64).cq(t, 4)
	parked := func(within time.Duration) bool {
		for t0 := time.Now(); time.Since(t0) < within; time.Sleep(100 * time.Microsecond) {
			if d.DriverParked() {
				return true
			}
		}
		return false
	}
	if !parked(5 * time.Second) {
		t.Fatal("an idle device's driver never parked")
	}
	d.Active()   // the driver's next round counts its spin from now
	cq.Poll(nil) // empty: wakes the driver
	for t0 := time.Now(); d.DriverParked(); time.Sleep(10 * time.Microsecond) {
		if time.Since(t0) > 5*time.Second {
			t.Fatal("a Poll of an empty CQ did not wake the parked driver")
		}
	}
	for t0 := time.Now(); time.Since(t0) < 3*spin; time.Sleep(time.Millisecond) {
		d.Active()
		if d.DriverParked() {
			t.Fatalf("the driver parked %v after it woke, with activity every millisecond and a spin of %v", time.Since(t0), spin)
		}
	}
	if !parked(5 * time.Second) {
		t.Fatal("the driver did not park once the activity stopped")
	}
}
