package netns

import (
	"errors"
	"github.com/goroce/goroce/internal/testenv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
)

// DefaultMTU is the default MTU of a pair's veth link.
const DefaultMTU = 1500

// LinkName is the name of the veth device in each namespace of a pair.
const LinkName = "veth0"

// ErrNotSupported is matched by errors from a missing privilege or tool.
var ErrNotSupported = errors.New("netns: not supported")

// Options configures NewPair. The zero value gives the defaults.
type Options struct {
	// Prefix is the IPv4 subnet of the link: A gets its first host address,
	// B the second. It must have room for two hosts (at most /30). Default
	// 10.77.x.0/24 with x from the pair's number.
	Prefix netip.Prefix
	// MTU of both veth ends. Default DefaultMTU.
	MTU int
}

// NS is a network namespace created by this package.
type NS struct {
	// Name is the namespace's name, as ip netns knows it.
	Name string
}

// Pair is two namespaces joined by a veth link.
type Pair struct {
	A, B         *NS              // the two namespaces
	AddrA, AddrB netip.Addr       // the addresses of the veth ends (LinkName in each)
	MACA, MACB   net.HardwareAddr // their MAC addresses (locally administered)
	Prefix       netip.Prefix     // the link's subnet
	MTU          int              // the MTU of both ends
}

// Require skips the test unless namespaces can be created: running as root,
// with the ip command installed.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.Netns, "netns: creating network namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
	}
	RequireTool(t, "ip")
}

// RequireTool skips the test unless the named command is installed (see
// package testenv: nft belongs to the nftables suite, iperf3 to the iperf3
// suite, other tools to the namespace suite).
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		suite := testenv.Netns
		switch name {
		case "nft":
			suite = testenv.Nftables
		case "iperf3":
			suite = testenv.Iperf3
		}
		testenv.Skipf(t, suite, "netns: the %s command is not installed", name)
	}
}
