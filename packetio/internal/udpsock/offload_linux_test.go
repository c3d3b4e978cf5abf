package udpsock

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
)

// Probe turns the offloads on or leaves them off with a reason, and GSO
// turns off for good only on EIO.
func TestOffloadStateProbe(t *testing.T) {
	open := func(checksum bool) int {
		fd, _, err := Open("test", netip.MustParseAddr("127.0.0.1"), Config{RecvBuffer: -1, SendBuffer: -1, Checksum: checksum})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	var off OffloadState
	if err := off.Probe("test", open(false), OffloadOff, OffloadOff); err != nil {
		t.Fatal(err)
	}
	want := OffloadStatus{GSOReason: "turned off by Options.GSO", GROReason: "turned off by Options.GRO"}
	if s := off.Status(); s != want || off.GSO() || off.GROIDs {
		t.Errorf("both off: %+v, want %+v", s, want)
	}

	var on OffloadState
	if err := on.Probe("test", open(true), OffloadAuto, OffloadAuto); err != nil {
		t.Fatal(err)
	}
	if s := on.Status(); !s.GSO || !s.GRO || !on.GSO() {
		t.Skipf("the kernel offers no UDP GSO or GRO: %v", s)
	}
	if on.GROIDs != GROKeepsIDs() {
		t.Errorf("GROIDs %v, GROKeepsIDs %v", on.GROIDs, GROKeepsIDs())
	}
	on.TurnOffGSO(unix.EINVAL)
	if !on.GSO() {
		t.Errorf("GSO turned off by EINVAL")
	}
	on.TurnOffGSO(unix.EIO)
	if s := on.Status(); on.GSO() || s.GSO || !strings.Contains(s.GSOReason, "EIO") || !s.GRO {
		t.Errorf("after EIO: %+v", s)
	}
}

// An offload the kernel lacks is off with the kernel's answer as the
// reason, or, required, an error matching packetio.ErrNotSupported.
func TestProbeLacking(t *testing.T) {
	lacks := func(int) error { return unix.ENOPROTOOPT }
	on, why, err := probe("test", -1, OffloadAuto, "GSO", "getsockopt", "UDP_SEGMENT", lacks)
	if on || err != nil || why != "the kernel lacks UDP_SEGMENT: "+unix.ENOPROTOOPT.Error() {
		t.Errorf("auto: %v %q %v", on, why, err)
	}
	on, _, err = probe("test", -1, OffloadRequire, "GRO", "setsockopt", "UDP_GRO", lacks)
	if on || !errors.Is(err, packetio.ErrNotSupported) || !strings.HasPrefix(err.Error(), "test: UDP GRO: setsockopt UDP_GRO: ") {
		t.Errorf("require: %v %v", on, err)
	}
}
