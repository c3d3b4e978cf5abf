package main

import (
	"bytes"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/devinfo"
)

func runArgs(args ...string) (int, string, string) {
	var o, e bytes.Buffer
	code := run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestDevices(t *testing.T) {
	code, out, errOut := runArgs("devices", "--addr", "127.0.0.1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := regexp.MustCompile(`^    device          \t   node GUID\n    ------          \t----------------\n    soft0           \t[0-9a-f]{16}\n$`)
	if !want.MatchString(out) {
		t.Errorf("output:\n%q", out)
	}
	if code, _, _ := runArgs("devices", "extra"); code != 2 {
		t.Errorf("operand: exit %d, want 2", code)
	}
	// RoCEv2 over IPv6: an IPv6 address is a soft device's as well; a
	// link-local one (GID 0 already) is refused.
	if code, out, errOut := runArgs("devices", "--addr", "::1"); code != 0 || !want.MatchString(out) {
		t.Errorf("IPv6 address: exit %d, %s%s", code, out, errOut)
	}
	if code, _, _ := runArgs("devices", "--addr", "fe80::1"); code != 1 {
		t.Errorf("link-local IPv6 address: exit %d, want 1", code)
	}
}

func TestDevinfo(t *testing.T) {
	code, out, errOut := runArgs("devinfo", "--addr", "127.0.0.1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, l := range []string{
		"hca_id:\tsoft0\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tphys_port_cnt:\t\t\t1\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n", // loopback's MTU is 65536
		"\t\t\tlink_layer:\t\tEthernet\n",
	} {
		if !strings.Contains(out, l) {
			t.Errorf("no %q in:\n%s", l, out)
		}
	}
	if !regexp.MustCompile(`\tnode_guid:\t\t\t[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}\n`).MatchString(out) {
		t.Errorf("node_guid:\n%s", out)
	}
	if strings.Contains(out, "GID[") || strings.Contains(out, "max_qp:") {
		t.Errorf("GIDs or device limits without -v:\n%s", out)
	}

	_, out, _ = runArgs("devinfo", "-v", "--addr", "127.0.0.1")
	for _, l := range []string{"\t\t\tGID[  0]:\t\tfe80::200:5eff:fe00:1, RoCE v2\n", "\t\t\tGID[  1]:\t\t::ffff:127.0.0.1, RoCE v2\n",
		"\tmax_qp:\t\t\t\t"} {
		if !strings.Contains(out, l) {
			t.Errorf("-v: no %q in:\n%s", l, out)
		}
	}
	// The GID table as rdma_rxe lays it out: then one GID per IPv6
	// address of the interface (lo's ::1, where IPv6 is on).
	if !strings.Contains(out, "\t\t\tgid_tbl_len:\t\t2\n") && !(strings.Contains(out, "\t\t\tgid_tbl_len:\t\t3\n") && strings.Contains(out, "\t\t\tGID[  2]:\t\t::1, RoCE v2\n")) {
		t.Errorf("-v: want GIDs 0 and 1, and ::1 at 2 if lo has it:\n%s", out)
	}
	if _, out, _ = runArgs("devinfo", "-l", "--addr", "127.0.0.1"); out != "1 HCA found:\n\tsoft0\n\n" {
		t.Errorf("-l: %q", out)
	}
	if code, _, e := runArgs("devinfo", "-d", "mlx5_0", "--addr", "127.0.0.1"); code != 1 || !strings.Contains(e, "IB device 'mlx5_0' wasn't found") {
		t.Errorf("-d mlx5_0: exit %d, %s", code, e)
	}
	if code, _, _ := runArgs("devinfo", "-i", "2", "--addr", "127.0.0.1"); code != 1 {
		t.Errorf("-i 2: exit %d, want 1", code)
	}
	if code, out, _ := runArgs("devinfo", "-i", "1", "-d", "soft0", "--addr", "127.0.0.1"); code != 0 || !strings.Contains(out, "port:\t1") {
		t.Errorf("-i 1 -d soft0: exit %d\n%s", code, out)
	}
}

// TestDevinfoPath: --path picks the soft device's packet path and devinfo
// shows it, with the udp path's offloads (--gso=false turns GSO off); an
// unknown path is refused.
func TestDevinfoPath(t *testing.T) {
	for _, c := range []struct{ path, flag, want string }{
		{"udp", "--gro=true", "\tpacket_path:\t\t\tudp (GSO "},
		{"udp", "--gso=false", "\tpacket_path:\t\t\tudp (GSO off: turned off by Options.GSO, "},
		{"auto", "--gso=true", "\tpacket_path:\t\t\t"},
	} {
		code, out, errOut := runArgs("devinfo", "--addr", "127.0.0.1", "--path", c.path, c.flag)
		if code != 0 {
			t.Fatalf("--path %s: exit %d: %s", c.path, code, errOut)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("--path %s: no %q in:\n%s", c.path, c.want, out)
		}
	}
	if code, _, e := runArgs("devinfo", "--addr", "127.0.0.1", "--path", "dpdk"); code != 1 || !strings.Contains(e, "unknown packet path") {
		t.Errorf("--path dpdk: exit %d, %q", code, e)
	}
}

// --tos takes a byte in decimal or hexadecimal, --ecn=false sets NoECN.
func TestTOSFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var s devinfo.Soft
	registerSoft(fs, &s)
	if err := fs.Parse([]string{"--tos", "0x68", "--ecn=false"}); err != nil || s.TOS != 0x68 || !s.NoECN {
		t.Fatalf("--tos 0x68 --ecn=false: TOS %#x NoECN %v, %v", s.TOS, s.NoECN, err)
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"--tos", "256"}); err == nil {
		t.Fatal("--tos 256 accepted")
	}
}
