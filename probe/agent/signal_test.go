package agent_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/probe/agent"
)

// TestRunUntilSignal: SIGHUP reloads the pinglist (file watching is off,
// so only the signal can), SIGTERM ends the run without an error.
func TestRunUntilSignal(t *testing.T) {
	// Caught by the test too, so that a signal sent before the agent
	// listens for it cannot end the test process.
	mine := make(chan os.Signal, 16)
	signal.Notify(mine, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(mine)

	path := filepath.Join(t.TempDir(), "pinglist.yaml")
	port := freePort(t, 2)
	write(t, path, pinglist(port, "a/0/g1", "b/1/g1"))
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr(0), uint16(port)).String())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := agent.New(agent.Options{Device: softContext(t, addr(0)), Provider: "soft", Pinglist: path, Self: addr(0),
		Listener: ln, Registry: reg, WatchInterval: -1})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.RunUntilSignal(ctx) }()

	write(t, path, pinglist(port, "a/0/g1", "b/1/g1", "c/2/g2"))
	ok := map[string]string{"result": "ok"}
	// Sent again until the agent has registered for it and reloaded.
	waitFor(t, 10*time.Second, "a reload on SIGHUP", func() bool {
		if counter(t, reg, "goroce_probe_agent_reloads_total", ok) >= 1 {
			return true
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		return false
	})
	if n := len(a.Targets()); n != 2 {
		t.Errorf("%d targets after the reload, want 2", n)
	}
	select {
	case err := <-done:
		t.Fatalf("Run ended before SIGTERM: %v", err)
	default:
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunUntilSignal: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunUntilSignal did not end on SIGTERM")
	}
}
