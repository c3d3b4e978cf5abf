package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// Side says how one side of a test connects to its peer and reports, as
// `goroce bench` runs it.
type Side struct {
	// Host is the server to connect to; "" makes this side the server.
	Host string
	// Port is the TCP port of the out-of-band exchange, or the rdma_cm
	// port with CM.
	Port int
	// CM connects through rdma_cm (perftest's -R): the exchange over an RC
	// connection, then one rdma_cm connection per QP. The device must be
	// an rdmacm.Device (a soft device).
	CM bool
	// JSON prints the report as JSON (WriteJSON) instead of perftest's
	// table (WriteReport).
	JSON bool
	// Out receives the report and, unless JSON, the server's banner.
	Out io.Writer
	// Log receives the server's banner with JSON, keeping Out JSON only;
	// nil drops it.
	Log io.Writer
}

// waitingBanner is what perftest's server prints before it accepts.
const waitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// banner prints the server's banner.
func (s *Side) banner() {
	w := s.Out
	if s.JSON {
		w = s.Log
	}
	if w != nil {
		fmt.Fprint(w, waitingBanner)
	}
}

// connect makes the out-of-band connection to the peer: it dials s.Host,
// or listens on s.Port and accepts; with s.CM over rdma_cm on dev.
func (s *Side) connect(ctx context.Context, dev verbs.Device) (*perftest.Conn, error) {
	if s.CM {
		cmdev, ok := dev.(rdmacm.Device)
		if !ok {
			return nil, fmt.Errorf("-R (rdma_cm) needs a soft device: %s has no QP 1 of goroce's", dev.Name())
		}
		if s.Host != "" {
			return perftest.DialCM(ctx, cmdev, s.Host, s.Port)
		}
		s.banner()
		return perftest.AcceptCM(ctx, cmdev, s.Port)
	}
	if s.Host != "" {
		return perftest.Dial(ctx, s.Host, s.Port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.Port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", s.Port, err)
	}
	s.banner()
	return perftest.Accept(ctx, ln)
}

// RunSide runs one side of the test o on dev: the client when s.Host is
// set, else the server. It connects to the peer as s says, runs the test
// (Run) and prints this side's report to s.Out.
func RunSide(ctx context.Context, dev verbs.Device, o Options, s Side) error {
	o.Client = s.Host != ""
	conn, err := s.connect(ctx, dev)
	if err != nil {
		return err
	}
	defer conn.Close()
	return s.runOne(ctx, dev, conn, o)
}

// RunBaselineSide runs one side of the raw-UDP baseline of the test o
// (Baseline) on the packet path conn, with the exchange over TCP (s.CM is
// not supported); the client prints the result row under the test's header.
func RunBaselineSide(ctx context.Context, conn packetio.Conn, o Options, s Side) error {
	if s.CM {
		return fmt.Errorf("%w: the baseline runs over TCP and UDP, not rdma_cm", ErrUsage)
	}
	o.Client = s.Host != ""
	ctl, err := s.connect(ctx, nil)
	if err != nil {
		return err
	}
	defer ctl.Close()
	tcp, _ := ctl.RemoteAddr().(*net.TCPAddr)
	if tcp == nil {
		return errors.New("no peer address")
	}
	peer, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return errors.New("no peer address")
	}
	r, err := Baseline(ctx, conn, peer.Unmap(), ctl, o)
	if err != nil || !o.Client {
		return err
	}
	out := &Outcome{MTU: 0, Results: []Result{r}}
	if s.JSON {
		return WriteJSON(s.Out, "udp", "udp", o, out, nil)
	}
	var b strings.Builder
	fmt.Fprintf(&b, ResultLine+"                    raw UDP baseline of %s (datagrams of the same sizes on the same UDP path)\n"+ResultLine, o.Test)
	io.WriteString(s.Out, b.String())
	WriteRows(s.Out, o, out)
	return nil
}

// runOne runs one side over conn and prints its report.
func (s *Side) runOne(ctx context.Context, dev verbs.Device, conn *perftest.Conn, o Options) error {
	vctx, err := dev.Open()
	if err != nil {
		return fmt.Errorf("couldn't get context for %s: %w", dev.Name(), err)
	}
	defer vctx.Close()
	out, err := Run(ctx, vctx, conn, o)
	if out != nil && (err == nil || len(out.Results) > 0) {
		if s.JSON {
			if jerr := WriteJSON(s.Out, dev.Name(), DevicePath(dev), o, out, err); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			WriteReport(s.Out, dev.Name(), DevicePath(dev), o, out)
			WriteCongestion(s.Out, out.Congestion)
		}
	}
	return err
}

// RunLoopback runs both sides of the test o in this process: the server on
// srv, whose address is addr, the client on cli; s.Host is ignored and
// s.Port is used with s.CM only (the exchange takes a free TCP port of
// addr otherwise). The client's report is printed to s.Out.
func RunLoopback(ctx context.Context, srv, cli rdmacm.Device, addr netip.Addr, o Options, s Side) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ln net.Listener
	port := s.Port
	if !s.CM {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort(addr.String(), "0")); err != nil {
			return err
		}
		port = ln.Addr().(*net.TCPAddr).Port
	}
	var wg sync.WaitGroup
	var srvErr error
	so := o // the server's options, copied before the client's are set below
	so.Client, so.Progress = false, nil
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conn *perftest.Conn
		var err error
		if s.CM {
			conn, err = perftest.AcceptCM(ctx, srv, port)
		} else {
			conn, err = perftest.Accept(ctx, ln)
		}
		if err != nil {
			srvErr = err
			return
		}
		defer conn.Close()
		vctx, err := srv.Open()
		if err != nil {
			srvErr = err
			return
		}
		defer vctx.Close()
		_, srvErr = Run(ctx, vctx, conn, so)
		if srvErr != nil {
			cancel() // the client would wait for a server that is gone
		}
	}()
	var conn *perftest.Conn
	var err error
	if s.CM {
		conn, err = perftest.DialCM(ctx, cli, addr.String(), port)
	} else {
		conn, err = perftest.Dial(ctx, addr.String(), port)
	}
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	defer conn.Close()
	o.Client = true
	cliErr := s.runOne(ctx, cli, conn, o)
	if cliErr != nil {
		conn.Close()
		cancel()
	}
	wg.Wait()
	if srvErr != nil {
		return fmt.Errorf("server: %w", srvErr)
	}
	return cliErr
}

// DevicePath is the packet path of a soft device ("" for other devices),
// as the report names it.
func DevicePath(dev verbs.Device) string {
	if sd, ok := dev.(*soft.Device); ok {
		return sd.Path()
	}
	return ""
}
