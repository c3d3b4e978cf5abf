//go:build linux

package soft

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/packetio/pipe"
)

// TestDriverParked: an idle device's driver parks in the packet path once
// its spin is over (DriverParked), and a busy device's never does.
func TestDriverParked(t *testing.T) {
	for _, busy := range []bool{false, true} {
		ca, cb := pipe.New(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), pipe.Options{})
		t.Cleanup(func() { cb.Close() })
		d, err := New(Options{Name: "park", Conn: ca, Spin: time.Millisecond, Busy: busy})
		e2eMust(t, err)
		parked := false
		for t0 := time.Now(); !parked && time.Since(t0) < 200*time.Millisecond; time.Sleep(100 * time.Microsecond) {
			parked = d.DriverParked()
		}
		d.Close()
		if parked == busy {
			t.Errorf("busy %v: the idle driver parked: %v, want %v", busy, parked, !busy)
		}
	}
}
