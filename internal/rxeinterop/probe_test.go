package rxeinterop

import (
	"context"
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

// probeSummaryRE is goroce probe once's summary line.
var probeSummaryRE = regexp.MustCompile(`(?m)^(\d+) probes sent, (\d+) completed, (\d+) lost, (\d+) late, (\d+) errors, ([\d.]+)% loss, (software|hardware) timestamps$`)

// probeCount is the number of probes of each direction.
const probeCount = 20

// TestProbeRxe runs goroce probe between rdma_rxe and the soft device, both
// ways: goroce built with -tags ibverbs runs on rxe0 in the guest (the
// libibverbs provider), goroce with the soft provider on this machine's side
// of the bridge. Each direction's responder is found over HTTP
// (/probe/v1/self), the prober sends probeCount probes over 8 flow labels
// to its 2 QPs and must lose none; the capture of each direction on the
// bridge is checked (goroce decode, and check-pcap.sh with
// GOROCE_WIRE_CHECK).
func TestProbeRxe(t *testing.T) {
	requireIbverbsGuest(t, "goroce probe")
	h := newHarness(t)
	ibvBin := filepath.Join(t.TempDir(), "goroce-ibv")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", "ibverbs", "-o", ibvBin, "github.com/goroce/goroce/cmd/goroce")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags ibverbs: %v\n%s", err, out)
	}
	h.startPeer("probe-boot", "true", "true")
	b, err := os.ReadFile(ibvBin)
	if err == nil {
		err = os.WriteFile(filepath.Join(h.share(), "goroce-ibv"), b, 0o755)
	}
	if err != nil {
		t.Fatalf("copying goroce into the guest's share: %v", err)
	}
	const guestGoroce = "/share/goroce-ibv"
	onceArgs := fmt.Sprintf("probe once -c %d -i 0.05 -W 2 --labels 8", probeCount)

	checkOnce := func(t *testing.T, who, out string, err error) {
		t.Helper()
		m := probeSummaryRE.FindStringSubmatch(out)
		if err != nil || m == nil || m[1] != fmt.Sprint(probeCount) || m[2] != fmt.Sprint(probeCount) || m[3] != "0" || m[5] != "0" {
			t.Errorf("%s prober: %v, summary %q", who, err, m)
		}
		if !strings.Contains(out, "network rtt min/p50/p99/max") {
			t.Errorf("%s prober: no network RTT line", who)
		}
	}

	t.Run("rxe-responder", func(t *testing.T) {
		pcap := filepath.Join(h.build, "captures", "peer-probe-rxe-responder.pcap")
		stopCap := h.startCapture(t, pcap)
		stopFile := filepath.Join(h.share(), "jobs", "probe-stop")
		os.Remove(stopFile)
		h.guestJob(t, "probe-resp", 110, guestGoroce+" probe responder -d rxe0 --qps 2 & p=$!; "+
			"while [ ! -e /share/jobs/probe-stop ]; do sleep 0.2; done; kill $p; wait $p")
		// The soft prober in the namespace, once the guest serves its self
		// document (exit 2 until then).
		var out string
		var err error
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			c := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, h.bin}, append(strings.Fields(onceArgs), "--addr", hostIP, "--path", "udp", guestIP)...)...)
			var o []byte
			o, err = c.CombinedOutput()
			cancel()
			out = string(o)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		os.WriteFile(stopFile, nil, 0o644)
		gout, grc := h.waitJob(t, "probe-resp", 60*time.Second)
		stopCap()
		t.Logf("guest (rc=%d): goroce probe responder -d rxe0:\n%s", grc, gout)
		t.Logf("host: goroce %s %s:\n%s", onceArgs, guestIP, out)
		checkOnce(t, "soft", out, err)
		if !strings.Contains(gout, "rxe0 (ibverbs)") || !regexp.MustCompile(fmt.Sprintf(`%d received, %d answered, 0 invalid, 0 dropped`, probeCount, probeCount)).MatchString(gout) {
			t.Errorf("the guest responder's report does not show rxe0 answering %d probes", probeCount)
		}
		h.checkCapture(t, pcap)
	})

	t.Run("soft-responder", func(t *testing.T) {
		pcap := filepath.Join(h.build, "captures", "peer-probe-soft-responder.pcap")
		stopCap := h.startCapture(t, pcap)
		resp := exec.Command("ip", "netns", "exec", h.ns, h.bin, "probe", "responder", "--addr", hostIP, "--path", "udp", "--qps", "2")
		rout := &testenv.Buffer{}
		resp.Stdout, resp.Stderr = rout, rout
		if err := resp.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- resp.Wait() }()
		defer func() {
			resp.Process.Signal(os.Interrupt) // ip netns exec execs goroce: this is its PID
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				resp.Process.Kill()
			}
		}()
		for !strings.Contains(rout.String(), "self at") {
			select {
			case err := <-done:
				t.Fatalf("goroce probe responder ended (%v):\n%s", err, rout.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		h.guestJob(t, "probe-once", 100, guestGoroce+" "+onceArgs+" -d rxe0 "+hostIP)
		gout, grc := h.waitJob(t, "probe-once", 120*time.Second)
		resp.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		stopCap()
		t.Logf("guest (rc=%d): goroce %s -d rxe0 %s:\n%s", grc, onceArgs, hostIP, gout)
		t.Logf("host: goroce probe responder:\n%s", rout.String())
		var err error
		if grc != 0 {
			err = fmt.Errorf("exit status %d", grc)
		}
		checkOnce(t, "rxe0", gout, err)
		if !strings.Contains(gout, "from rxe0 (ibverbs)") {
			t.Errorf("the guest prober does not say it ran on rxe0")
		}
		h.checkCapture(t, pcap)
	})
}
