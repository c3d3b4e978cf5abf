// Package testenv decides what a test does when the machine lacks what one
// of goroce's kernel-level or tool-dependent suites needs: skip with the
// reason, or, when the suite is listed in GOROCE_REQUIRE, fail with it.
//
// A developer's machine without root, nftables or a qemu guest runs what it
// can and says what it skipped. CI installs what the suites need and sets
// GOROCE_REQUIRE to the suites that must run there, so that a suite which
// silently stopped running (a missing package, a kernel feature gone, a
// harness that no longer builds) turns CI red instead of green:
//
//	GOROCE_REQUIRE=netns,nftables,afxdp,uring,wirecheck,rxe,ibverbs go test ./...
//
// GOROCE_REQUIRE=all requires every suite.
package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// EnvRequire is the environment variable that lists the required suites,
// separated by commas.
const EnvRequire = "GOROCE_REQUIRE"

// The suites.
const (
	// Netns: tests between network namespaces (root, iproute2).
	Netns = "netns"
	// Nftables: packet loss and drop rules with nft in a namespace.
	Nftables = "nftables"
	// AFXDP: the AF_XDP packet path (root, CAP_BPF, a kernel with XDP).
	AFXDP = "afxdp"
	// Uring: the io_uring packet path.
	Uring = "uring"
	// WireCheck: captures judged by the independent checker (tshark +
	// scapy), GOROCE_WIRE_CHECK set.
	WireCheck = "wirecheck"
	// RxeVM: interop with Linux rdma_rxe in the qemu guest
	// (GOROCE_RXE_VM).
	RxeVM = "rxe"
	// Ibverbs: the libibverbs provider (cgo, libibverbs-dev) in the guest.
	Ibverbs = "ibverbs"
	// Prometheus: a real Prometheus server scraping the prober.
	Prometheus = "prometheus"
	// Chromium: the prober's page in headless Chromium.
	Chromium = "chromium"
	// Iperf3: TCP through the load tests' bottleneck with iperf3, the
	// anchor goroce's goodput is compared with.
	Iperf3 = "iperf3"
	// CPrograms: Debian's unmodified RDMA programs (ibverbs-utils,
	// perftest) on libgoroce-verbs.so (cgo, libibverbs-dev).
	CPrograms = "cprograms"
)

// Suites lists every suite name.
var Suites = []string{Netns, Nftables, AFXDP, Uring, WireCheck, RxeVM, Ibverbs, Prometheus, Chromium, Iperf3, CPrograms}

// Required reports whether suite is listed in GOROCE_REQUIRE.
func Required(suite string) bool {
	return listed(os.Getenv(EnvRequire), suite)
}

func listed(list, suite string) bool {
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == suite || s == "all" {
			return true
		}
	}
	return false
}

// Skip skips t, saying why, unless suite is required: then it fails t
// with the same reason.
func Skip(t testing.TB, suite string, args ...any) {
	t.Helper()
	skip(t, suite, fmt.Sprint(args...))
}

// Skipf is Skip with a format.
func Skipf(t testing.TB, suite string, format string, args ...any) {
	t.Helper()
	skip(t, suite, fmt.Sprintf(format, args...))
}

func skip(t testing.TB, suite, reason string) {
	t.Helper()
	if Required(suite) {
		t.Fatalf("required suite %q (%s) cannot run: %s", suite, EnvRequire, reason)
		return
	}
	t.Skipf("[%s] %s", suite, reason)
}
