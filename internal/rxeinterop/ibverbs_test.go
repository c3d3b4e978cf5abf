package rxeinterop

import (
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestIbverbsRxe runs provider/ibverbs on rdma_rxe inside the guest: the
// verbs conformance suite (verbs/verbstest) and the provider's own tests,
// its benchmarks, and goroce pingpong built with the ibverbs provider (on
// rxe0 in the guest) against goroce pingpong with the soft provider (on this
// machine's side of the namespace), RC and UD, each side as server, the
// same with goroce bench write_bw, and goroce rping through librdmacm
// against Linux rping and against the soft provider (rpingIbverbs).
//
// The test binary and goroce are built here with -tags ibverbs (cgo against
// this machine's libibverbs-dev; the guest's rdma-core 44 runs them) and
// copied into the kept guest's share directory.
func TestIbverbsRxe(t *testing.T) {
	requireIbverbsGuest(t, "provider/ibverbs")
	h := newHarness(t)
	tmp := t.TempDir()
	suite, ibvBin := filepath.Join(tmp, "ibverbs.test"), filepath.Join(tmp, "goroce-ibv")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, args := range [][]string{
		{"test", "-c", "-tags", "ibverbs", "-o", suite, "github.com/goroce/goroce/provider/ibverbs"},
		{"build", "-tags", "ibverbs", "-o", ibvBin, "github.com/goroce/goroce/cmd/goroce"},
	} {
		cmd := exec.Command(gobin, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	h.startPeer("ibv-boot", "true", "true")
	for _, f := range []string{suite, ibvBin} {
		b, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(h.share(), filepath.Base(f)), b, 0o755)
		}
		if err != nil {
			t.Fatalf("copying %s into the guest's share: %v", f, err)
		}
	}
	guestSuite, guestGoroce := "/share/"+filepath.Base(suite), "/share/"+filepath.Base(ibvBin)

	t.Run("suite", func(t *testing.T) {
		h.guestJob(t, "ibv-suite", 280, guestSuite+" -test.v -test.timeout 250s -ibverbs.dev rxe0")
		out, rc := h.waitJob(t, "ibv-suite", 300*time.Second)
		t.Logf("guest: ibverbs.test -test.v (rc=%d):\n%s", rc, out)
		if rc != 0 {
			t.Fatalf("the provider's tests failed in the guest (exit %d)", rc)
		}
		// Every test must have run on rxe0, none skipped.
		for _, name := range []string{"TestSuite", "TestSuite/RC/Ops", "TestSuite/RC/Batch", "TestSuite/RC/SRQ",
			"TestSuite/RC/RemoteAccessError", "TestSuite/UD", "TestSuite/Events", "TestSuite/QPStates",
			"TestSuite/BadInput", "TestSuite/AsyncEvents", "TestRegistry", "TestQuery", "TestCQEx", "TestErrors", "TestCreateErrno", "TestNoAllocs", "TestProviderDevices",
			"TestCMDialAccept", "TestPollWaitCQDestroyed"} {
			if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(name) + ` `).MatchString(out) {
				t.Errorf("%s did not pass in the guest", name)
			}
		}
	})

	t.Run("bench", func(t *testing.T) {
		b := guestSuite + " -test.run - -ibverbs.dev rxe0"
		h.guestJob(t, "ibv-bench", 280, b+" -test.bench Interleaved -test.benchtime 20x && "+
			b+" -test.bench '^Benchmark[^I]' -test.benchtime 3000x")
		out, rc := h.waitJob(t, "ibv-bench", 300*time.Second)
		t.Logf("guest: ibverbs.test -test.bench (rc=%d):\n%s", rc, out)
		if rc != 0 || !strings.Contains(out, "post1-x-batch32") || !strings.Contains(out, "BenchmarkPostRecv/batch=32") {
			t.Fatalf("the benchmarks failed in the guest (exit %d)", rc)
		}
	})

	soft := func(mode, server string) []string { return h.goroceArgs(mode, hostIP, server) }
	// The clients sleep on completion events (-e): Wait on the channel.
	ibv := func(mode, server string) string {
		c := fmt.Sprintf("%s pingpong %s -d rxe0 -g %d -n %d --timeout 100s", guestGoroce, mode, h.gidx, iters)
		if server != "" {
			c += " -e"
		}
		if server != "" {
			c += " " + server
		}
		return c
	}
	t.Run("pingpong/rc/ibverbs-server", func(t *testing.T) {
		r := h.pair(t, "ibv-rc-server", ibv("rc", ""), soft("rc", guestIP), false)
		h.check(t, r, 4096)
	})
	t.Run("pingpong/rc/soft-server", func(t *testing.T) {
		r := h.pair(t, "ibv-rc-client", ibv("rc", hostIP), soft("rc", ""), true)
		h.check(t, r, 4096)
	})
	t.Run("pingpong/ud/ibverbs-server", func(t *testing.T) {
		r := h.pair(t, "ibv-ud-server", ibv("ud", ""), soft("ud", guestIP), false)
		h.check(t, r, 1024)
	})
	t.Run("pingpong/ud/soft-server", func(t *testing.T) {
		r := h.pair(t, "ibv-ud-client", ibv("ud", hostIP), soft("ud", ""), true)
		h.check(t, r, 1024)
	})
	// goroce bench write_bw, perftest's exchange: the ibverbs provider on
	// rxe0 against the soft provider, each side as server.
	bw := func(t *testing.T, label, guestCmd string, host []string, hostServer bool) {
		r := h.pair(t, label, guestCmd, host, hostServer)
		t.Logf("guest (rc=%d): %s\n%s", r.guestRC, r.guestCmd, r.guestOut)
		t.Logf("host (%v): %s\n%s", r.hostErr, r.hostCmd, r.hostOut)
		if r.guestRC != 0 || r.hostErr != nil {
			t.Fatalf("guest exit %d, host %v", r.guestRC, r.hostErr)
		}
		row := regexp.MustCompile(`(?m)^\s*4096\s+50\s+\d`)
		if !strings.Contains(r.guestOut+r.hostOut, "Device         : rxe0") || !row.MatchString(r.guestOut) || !row.MatchString(r.hostOut) {
			t.Errorf("no write_bw report of 50 iterations of 4096 bytes on both sides, one of them on rxe0")
		}
		keepCapture(t, r.pcap)
	}
	bwArgs := " write_bw -s 4096 -n 50 -F --verify --timeout 100s" // the soft side adds --path udp, as goroceArgs
	t.Run("bench/write_bw/ibverbs-server", func(t *testing.T) {
		host := append([]string{h.bin, "bench"}, strings.Fields(bwArgs+" --path udp --addr "+hostIP+" "+guestIP)...)
		bw(t, "ibv-bw-server", fmt.Sprintf("%s bench%s -d rxe0 -x %d", guestGoroce, bwArgs, h.gidx), host, false)
	})
	t.Run("bench/write_bw/soft-server", func(t *testing.T) {
		host := append([]string{h.bin, "bench"}, strings.Fields(bwArgs+" --path udp --addr "+hostIP)...)
		bw(t, "ibv-bw-client", fmt.Sprintf("%s bench%s -d rxe0 -x %d %s", guestGoroce, bwArgs, h.gidx, hostIP), host, true)
	})

	t.Run("rping", func(t *testing.T) { rpingIbverbs(t, h, guestGoroce+" rping --ibdev rxe0") })

	t.Run("devices", func(t *testing.T) {
		h.guestJob(t, "ibv-devices", 60, guestGoroce+" devices; "+guestGoroce+" devinfo -v -d rxe0")
		out, rc := h.waitJob(t, "ibv-devices", 90*time.Second)
		t.Logf("guest: goroce devices; goroce devinfo -v -d rxe0 (rc=%d):\n%s", rc, out)
		if rc != 0 || !regexp.MustCompile(`(?m)^\s+rxe0\s+[0-9a-f]{16}$`).MatchString(out) ||
			!strings.Contains(out, "hca_id:\trxe0") || !strings.Contains(out, "::ffff:"+guestIP+", RoCE v2") {
			t.Errorf("goroce devices/devinfo in the guest do not show rxe0 and its IPv4-mapped GID")
		}
	})
}

// requireIbverbsGuest skips (or, with the suites required, fails) t unless
// goroce can be built with the libibverbs provider for the rxe guest:
// GOROCE_RXE_VM set, libibverbs-dev's header and a C compiler here. what
// says what the test runs there.
func requireIbverbsGuest(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("GOROCE_RXE_VM") == "" {
		testenv.Skip(t, testenv.RxeVM, "set GOROCE_RXE_VM to the rxe-vm harness directory (and RXE_VM_BUILD to its build directory) to run "+what+" on Linux rdma_rxe in a qemu guest")
	}
	for _, header := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(header); err != nil {
			testenv.Skipf(t, testenv.Ibverbs, "provider/ibverbs needs libibverbs-dev and librdmacm-dev (%s: %v)", header, err)
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Skip(t, testenv.Ibverbs, "provider/ibverbs needs cgo and a C compiler (gcc)")
	}
}
