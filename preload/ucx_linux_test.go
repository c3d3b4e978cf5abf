package preload_test

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/capture"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/preload"
)

// needUCX skips t unless Debian's ucx-utils is installed.
func needUCX(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Skipf(t, testenv.CPrograms, "%s is not installed (apt-get install ucx-utils)", p)
		}
	}
}

// TestUCXInfo: UCX lists its verbs transports on a soft device (it leaves
// out a device whose /dev/infiniband file is missing, which the library
// answers for).
func TestUCXInfo(t *testing.T) {
	needUCX(t, "ucx_info")
	out, err := run(t, preload.Options{Addrs: []string{loAddr}, Path: "udp"}, "ucx_info", "-d")
	if err != nil {
		t.Fatalf("ucx_info -d: %v\n%s", err, out)
	}
	for _, tl := range []string{"rc_verbs", "ud_verbs"} {
		if !regexp.MustCompile(`Transport: ` + tl + `\s+#\s+Device: soft0:1`).MatchString(out) {
			t.Errorf("ucx_info -d lists no %s on soft0:1:\n%s", tl, out)
		}
	}
}

// ucxTest is one ucx_perftest run: its arguments, the iterations it does,
// and the RoCE operations its traffic must hold.
type ucxTest struct {
	name  string
	args  []string
	iters int
	ops   []string // opcode names (wire.Opcode.String) the server must see
}

// TestUCXPerftest runs Debian's unmodified ucx_perftest (UCX 1.13) between
// two processes on soft devices in a fresh pair of namespaces, as nobody,
// over UCX's RC verbs transport (UCX_TLS=rc_v: rc_verbs, and ud_verbs for
// its connection set-up), and checks that the client reports every
// iteration and that the server's capture holds the test's traffic, RC, on
// the wire, every packet sound.
func TestUCXPerftest(t *testing.T) {
	netns.Require(t)
	netns.RequireTool(t, "setpriv")
	needUCX(t, "ucx_perftest")
	l := lib(t)
	pair := netns.NewPair(t, netns.Options{})
	dir, err := os.MkdirTemp("", "goroce-ucx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777) // the programs run as nobody
	tests := []ucxTest{
		{"tag_lat", []string{"-t", "tag_lat", "-n", "200"}, 200, []string{"RC_SEND_ONLY"}},
		{"ucp_put_bw", []string{"-t", "ucp_put_bw", "-s", "65536", "-n", "100"}, 100, []string{"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_LAST"}},
		// 1 MiB tag messages go by rendezvous: the receiver READs them.
		{"tag_bw_rndv", []string{"-t", "tag_bw", "-s", "1048576", "-n", "20"}, 20, []string{"RC_RDMA_READ_REQUEST"}},
		{"uct_am_lat", []string{"-t", "am_lat", "-x", "rc_verbs", "-d", "soft0:1", "-n", "200"}, 200, []string{"RC_SEND_ONLY"}},
	}
	for _, u := range tests {
		t.Run(u.name, func(t *testing.T) {
			pcap := filepath.Join(dir, u.name+"-LOCAL.pcap") // each side its own
			p := program{
				name:   "ucx_perftest",
				server: u.args,
				client: append(append([]string{}, u.args...), "ADDR"),
				port:   13337, // ucx_perftest's
				env:    []string{"UCX_TLS=rc_v", "UCX_NET_DEVICES=soft0:1", "GOROCE_PCAP=" + pcap},
			}
			srv, cli, err := between(t, pair, l, p)
			if err != nil {
				t.Fatalf("%v\nserver:\n%s\nclient:\n%s", err, srv, cli)
			}
			if !regexp.MustCompile(`(?m)^Final:\s+` + strconv.Itoa(u.iters) + `\s`).MatchString(cli) {
				t.Errorf("client reports no %d iterations:\n%s\nserver:\n%s", u.iters, cli, srv)
			}
			pcap = strings.ReplaceAll(pcap, "LOCAL", pair.AddrA.String())
			seen, bad, err := opcodes(pcap)
			if err != nil {
				t.Fatal(err)
			}
			if bad > 0 {
				t.Errorf("%d packets of the capture are bad", bad)
			}
			for _, op := range u.ops {
				if seen[op] < u.iters {
					t.Errorf("the server saw %d %s packets, want at least %d (all: %v)", seen[op], op, u.iters, seen)
				}
			}
			t.Logf("server's packets: %v", seen)
			if os.Getenv("GOROCE_WIRE_CHECK") != "" {
				checkWire(t, pcap)
			}
		})
	}
}

// opcodes counts the RoCE packets of a capture by opcode, and the bad ones.
func opcodes(path string) (map[string]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		return nil, 0, err
	}
	seen, bad := map[string]int{}, 0
	var d capture.Decoder
	var rec capture.Record
	var p capture.Packet
	for {
		if err := r.Next(&rec); errors.Is(err, io.EOF) {
			return seen, bad, nil
		} else if err != nil {
			return nil, 0, err
		}
		d.Decode(&rec, &p)
		if !p.RoCE {
			continue
		}
		if p.Bad() {
			bad++
		}
		seen[p.BTH().Opcode().String()]++
	}
}
