package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// freeTCPPort returns a TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRunSide runs a server and a client side over TCP and two soft devices
// on loopback: the server prints the banner and its report, the client its
// report (the table, or JSON with the banner on Log).
func TestRunSide(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	for _, jsonOut := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		port := freeTCPPort(t)
		o := Options{Test: Test{Verb: Write}, Size: 4096, Iters: 200}
		var srvOut, srvLog testenv.Buffer
		errc := make(chan error, 1)
		go func() {
			errc <- RunSide(ctx, srv, o, Side{Port: port, JSON: jsonOut, Out: &srvOut, Log: &srvLog})
		}()
		var cliOut bytes.Buffer
		cliErr := RunSide(ctx, cli, o, Side{Host: addrA.String(), Port: port, JSON: jsonOut, Out: &cliOut})
		srvErr := <-errc
		cancel()
		if cliErr != nil || srvErr != nil {
			t.Fatalf("json %v: client %v, server %v", jsonOut, cliErr, srvErr)
		}
		banner := srvOut.String()
		if jsonOut {
			banner = srvLog.String()
			var rep JSONReport
			if err := json.Unmarshal(cliOut.Bytes(), &rep); err != nil || rep.Side != "client" || len(rep.Results) != 1 {
				t.Errorf("client JSON: %v, %+v\n%s", err, rep, cliOut.String())
			}
		} else if !strings.Contains(cliOut.String(), "RDMA_Write BW Test") || !strings.Contains(cliOut.String(), " 4096       200") {
			t.Errorf("client report:\n%s", cliOut.String())
		}
		if !strings.HasPrefix(banner, waitingBanner) {
			t.Errorf("json %v: server output does not start with the banner:\n%s", jsonOut, banner)
		}
	}
}

// TestRunLoopbackSides runs both sides in one call, over TCP and over
// rdma_cm, and checks the client's report.
func TestRunLoopbackSides(t *testing.T) {
	srv, cli := newDev(t, addrA), newDev(t, addrB)
	for _, cm := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out bytes.Buffer
		err := RunLoopback(ctx, srv, cli, addrA, Options{Test: Test{Verb: Send, Lat: true}, Iters: 100},
			Side{Port: freeTCPPort(t), CM: cm, Out: &out})
		cancel()
		if err != nil {
			t.Fatalf("cm %v: %v", cm, err)
		}
		if !strings.Contains(out.String(), "Send Latency Test") || !strings.Contains(out.String(), "soft0") {
			t.Errorf("cm %v: report:\n%s", cm, out.String())
		}
	}
}

// TestRunSideErrors checks the errors before any traffic: rdma_cm on a
// device without goroce's QP 1, the baseline over rdma_cm, and a server
// whose port is taken.
func TestRunSideErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := Options{Test: Test{Verb: Write}}
	sdev := newDev(t, addrA)
	var dev verbs.Device = struct{ verbs.Device }{sdev} // hides the rdma_cm methods
	if err := RunSide(ctx, dev, o, Side{CM: true}); err == nil || !strings.Contains(err.Error(), "needs a soft device") {
		t.Errorf("rdma_cm on a plain device: %v", err)
	}
	uc, err := udp.Listen(addrB, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := RunBaselineSide(ctx, uc, o, Side{CM: true}); !errors.Is(err, ErrUsage) {
		t.Errorf("baseline over rdma_cm: %v, want ErrUsage", err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var out bytes.Buffer
	err = RunSide(ctx, sdev, o, Side{Port: ln.Addr().(*net.TCPAddr).Port, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "couldn't listen to port") || out.Len() != 0 {
		t.Errorf("port taken: %v, output %q", err, out.String())
	}
}

func TestDevicePath(t *testing.T) {
	dev, _, err := soft.Open(soft.OpenOptions{Addr: addrA.String(), Path: "udp", Inspect: true})
	if err != nil {
		t.Skipf("no soft device on %v: %v", addrA, err)
	}
	defer dev.Close()
	if got := DevicePath(dev); !strings.HasPrefix(got, "udp (GSO ") {
		t.Errorf("DevicePath(soft on udp) = %q, want udp with its offloads", got)
	}
	if got := DevicePath(struct{ verbs.Device }{dev}); got != "" {
		t.Errorf("DevicePath(other) = %q, want empty", got)
	}
}
