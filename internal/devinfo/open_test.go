package devinfo

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// This package's loopback address.
const testAddr = "127.0.8.1"

// named is a device of which only the name and node GUID are asked.
type named struct {
	verbs.Device
	name string
	guid uint64
}

func (d named) Name() string { return d.name }
func (d named) GUID() uint64 { return d.guid }

func TestWriteDevices(t *testing.T) {
	for _, c := range []struct {
		devs []verbs.Device
		want string
	}{
		{nil, "    device          \t   node GUID\n    ------          \t----------------\n"},
		{[]verbs.Device{named{name: "soft0", guid: 0x505400fffe990002}, named{name: "rxe0", guid: 1}},
			"    device          \t   node GUID\n    ------          \t----------------\n" +
				"    soft0           \t505400fffe990002\n    rxe0            \t0000000000000001\n"},
	} {
		var b bytes.Buffer
		WriteDevices(&b, c.devs)
		if b.String() != c.want {
			t.Errorf("WriteDevices(%d devices) =\n%q, want\n%q", len(c.devs), b.String(), c.want)
		}
	}
}

func TestWriteNames(t *testing.T) {
	for _, c := range []struct {
		devs []verbs.Device
		want string
	}{
		{nil, "0 HCAs found:\n\n"},
		{[]verbs.Device{named{name: "soft0"}}, "1 HCA found:\n\tsoft0\n\n"},
		{[]verbs.Device{named{name: "soft0"}, named{name: "rxe0"}}, "2 HCAs found:\n\tsoft0\n\trxe0\n\n"},
	} {
		var b bytes.Buffer
		WriteNames(&b, c.devs)
		if b.String() != c.want {
			t.Errorf("WriteNames(%d devices) = %q, want %q", len(c.devs), b.String(), c.want)
		}
	}
}

func TestOpenHWSoftNames(t *testing.T) {
	for _, name := range []string{"", SoftName, "no-such-device"} {
		if d, ok := OpenHW(name); ok {
			t.Errorf("OpenHW(%q) = %v, want none", name, d.Name())
		}
	}
}

func TestSoftOpen(t *testing.T) {
	s := Soft{Addr: testAddr, Path: "udp"}
	a, _, err := s.Resolve()
	if err != nil || a.String() != testAddr {
		t.Fatalf("Resolve = %v, %v", a, err)
	}
	if _, _, err := (Soft{Addr: "not-an-address"}).Resolve(); err == nil || !strings.HasPrefix(err.Error(), "--addr: ") {
		t.Errorf("Resolve(bad address): %v", err)
	}
	if _, _, _, err := s.OpenDevice("nosuch0"); err == nil || err.Error() != "IB device nosuch0 not found" {
		t.Errorf("OpenDevice(nosuch0): %v", err)
	}
	for _, name := range []string{"", SoftName} {
		o, err := s.OpenContext(name)
		if err != nil {
			t.Fatalf("OpenContext(%q): %v", name, err)
		}
		pa, err := o.Context.QueryPort(1)
		if o.Name != SoftName || o.Provider != "soft" || err != nil || pa.State != verbs.PortActive {
			t.Errorf("OpenContext(%q): %s %s, port %v %v", name, o.Name, o.Provider, pa.State, err)
		}
		o.Close()
	}
	// Closed, the device's UDP port is free again for the next.
	dev, err := s.Open(true)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	if !strings.HasPrefix(dev.Path(), "udp (GSO ") || dev.Addr().String() != testAddr {
		t.Errorf("Open: path %q addr %v", dev.Path(), dev.Addr())
	}
	dev.Close()
}

func TestList(t *testing.T) {
	hw, _ := HWDevices()
	for _, softOnly := range []bool{false, true} {
		l, err := Soft{Addr: testAddr, Path: "udp"}.List(softOnly)
		if err != nil {
			t.Fatalf("List(%v): %v", softOnly, err)
		}
		want := 1 + len(hw)
		if softOnly {
			want = 1
		}
		if l.Soft == nil || len(l.Devices) != want || l.Devices[0] != verbs.Device(l.Soft) || l.Soft.Name() != SoftName {
			t.Errorf("List(%v): %d devices, soft %v", softOnly, len(l.Devices), l.Soft)
		}
		l.Close()
	}
	// Inspection takes a port the kernel chooses: it works beside a device
	// that holds port 4791.
	dev, err := Soft{Addr: testAddr, Path: "udp"}.Open(true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	l, err := Soft{Addr: testAddr, Path: "udp"}.List(true)
	if err != nil {
		t.Fatalf("List beside a running device: %v", err)
	}
	l.Close()
	if _, err := (Soft{Addr: "not-an-address"}).List(true); err == nil {
		t.Error("List(true) without a soft device: no error")
	}
	if len(hw) == 0 {
		if _, err := (Soft{Addr: "not-an-address"}).List(false); err == nil {
			t.Error("List(false) without any device: no error")
		}
	}
}

func TestOpenPair(t *testing.T) {
	a, b, addr, err := Soft{Addr: "127.0.8.2"}.OpenPair()
	if err != nil {
		t.Fatal(err)
	}
	if addr.String() != "127.0.8.2" || a.Addr().String() != "127.0.8.2" || b.Addr().String() != "127.0.8.3" {
		t.Errorf("OpenPair: %v, %v, %v", addr, a.Addr(), b.Addr())
	}
	// The second address taken: the first device is closed again.
	if _, _, _, err := (Soft{Addr: "127.0.8.1"}).OpenPair(); err == nil {
		t.Error("OpenPair over a taken address: no error")
	}
	a.Close()
	b.Close()
	c, d, _, err := Soft{Addr: "127.0.8.1"}.OpenPair()
	if err != nil {
		t.Fatalf("OpenPair after the first device was closed again: %v", err)
	}
	c.Close()
	d.Close()
	for _, bad := range []string{"::1", "soft", "127.0.0.1/8"} {
		if _, _, _, err := (Soft{Addr: bad}).OpenPair(); err == nil || !strings.Contains(err.Error(), "want an IPv4 address") {
			t.Errorf("OpenPair(%q): %v", bad, err)
		}
	}
}
