package soft

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveAddr(t *testing.T) {
	if a, err := ResolveAddr("127.0.51.1"); err != nil || a.String() != "127.0.51.1" {
		t.Errorf("ResolveAddr(127.0.51.1) = %v, %v", a, err)
	}
	if a, err := ResolveAddr("::ffff:127.0.51.2"); err != nil || a.String() != "127.0.51.2" {
		t.Errorf("an IPv4-mapped address: %v, %v", a, err)
	}
	for s, want := range map[string]string{"::1": "::1", "fd99::1": "fd99::1", "[fd99::1]": "fd99::1"} {
		if a, err := ResolveAddr(s); err != nil || a.String() != want {
			t.Errorf("ResolveAddr(%q) = %v, %v; want %s", s, a, err, want)
		}
	}
	for _, bad := range []string{"fe80::1", "fe80::1%lo", "::", "ff02::1", "not-an-address"} {
		if _, err := ResolveAddr(bad); err == nil {
			t.Errorf("ResolveAddr(%q) accepted", bad)
		}
	}
	if a, err := ResolveAddr(""); err == nil && (!a.Is4() || a.IsLoopback()) {
		t.Errorf("the default address %v is not a non-loopback IPv4 address", a)
	}
}

// TestOpenPcap opens a soft device the way goroce's commands do, recording
// to a pcap file, and sees the file written and closed with the device.
func TestOpenPcap(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dev.pcap")
	dev, ch, err := Open(OpenOptions{Addr: "127.0.51.3", Path: "udp", Pcap: file})
	if err != nil {
		t.Skipf("UDP on 127.0.51.3: %v", err)
	}
	if dev.Name() != "soft0" || !strings.Contains(ch.String(), "udp") {
		t.Errorf("device %q on path %q", dev.Name(), ch)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil || len(b) != 24 || b[0] != 0xd4 || b[1] != 0xc3 {
		t.Fatalf("pcap file: %d bytes, %v", len(b), err)
	}
	if _, _, err := Open(OpenOptions{Addr: "127.0.51.4", Path: "udp", Pcap: filepath.Join(t.TempDir(), "no", "dir.pcap")}); err == nil {
		t.Error("Open with a pcap file that cannot be created succeeded")
	}
}
