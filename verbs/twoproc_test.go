package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// The environment of the second process of TestTwoProcesses.
const (
	envPeerAddr = "GOROCE_VERBS_PEER_ADDR" // its device's address
	envPeerTCP  = "GOROCE_VERBS_PEER_TCP"  // where to swap endpoints
)

// side opens a soft device on a UDP socket at addr and a QPSet on it.
func side(addr netip.Addr) (*soft.Device, *verbs.QPSet, error) {
	conn, err := udp.Listen(addr, udp.Options{})
	if err != nil {
		return nil, nil, err
	}
	dev, err := soft.New(soft.Options{Conn: conn})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	ctx, err := dev.Open()
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	s, err := verbs.NewQPSet(ctx, verbs.QPTRC, make([]byte, 4096), nil)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, s, nil
}

// TestTwoProcesses runs an RC connection between two processes: this one
// and the test binary run again as the peer. They swap Endpoints over TCP
// (cm), connect their QPs (verbs.Connect) and talk over UDP on loopback:
// this side SENDs with immediate data; the peer, on its receive
// completion, WRITEs the data back reversed into the memory this side
// exposed and then SENDs to say so.
func TestTwoProcesses(t *testing.T) {
	if os.Getenv(envPeerAddr) != "" {
		t.Skip("this is the peer process")
	}
	x, y := byte(rand.IntN(200)+40), byte(rand.IntN(250)+1)
	addrA, addrB := netip.AddrFrom4([4]byte{127, x, y, 1}), netip.AddrFrom4([4]byte{127, x, y, 2})
	dev, a, err := side(addrA)
	if err != nil {
		t.Skipf("UDP on %v: %v", addrA, err)
	}
	defer dev.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peer := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestTwoProcessesPeer$", "-test.count=1")
	peer.Env = append(os.Environ(), envPeerAddr+"="+addrB.String(), envPeerTCP+"="+ln.Addr().String())
	var out bytes.Buffer
	peer.Stdout, peer.Stderr = &out, &out
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := peer.Wait(); err != nil {
			t.Errorf("the peer process: %v\n%s", err, out.String())
		}
	}()

	b, err := cm.AcceptEndpoint(ctx, ln, a.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.Connect(a.QP, a.Endpoint, b, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: a.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	copy(a.MR.Buf()[100:], "two processes")
	if _, err := a.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
		SGList: a.SGE(100, 13), Imm: 0x600d}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 2)
	for got := 0; got < 2; {
		n, err := a.Wait(ctx, wc[got:])
		if err != nil {
			t.Fatalf("%v (peer: %s)", err, out.String())
		}
		got += n
	}
	for _, c := range wc {
		if c.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v; device %+v", c, dev.Stats())
		}
	}
	a.QP.Query() // the peer's WRITE, done by this process's device, happens before the read below
	if got := string(a.MR.Buf()[200:213]); got != "sessecorp owt" {
		t.Fatalf("the peer wrote %q, want the SEND reversed", got)
	}
}

// TestTwoProcessesPeer is the peer of TestTwoProcesses, run in the second
// process (it does nothing otherwise).
func TestTwoProcessesPeer(t *testing.T) {
	addr := os.Getenv(envPeerAddr)
	if addr == "" {
		t.Skip("the peer of TestTwoProcesses: runs only in the process that test starts")
	}
	if err := runPeer(netip.MustParseAddr(addr), os.Getenv(envPeerTCP)); err != nil {
		t.Fatal(err)
	}
}

func runPeer(addr netip.Addr, tcp string) error {
	dev, b, err := side(addr)
	if err != nil {
		return err
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := cm.DialEndpoint(ctx, tcp, b.Endpoint)
	if err != nil {
		return err
	}
	if err := verbs.Connect(b.QP, b.Endpoint, a, nil); err != nil {
		return err
	}
	// Receives are posted from INIT on (a SEND that comes first meets an
	// RNR NAK and is retried).
	if _, err := b.QP.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: b.SGE(0, 64)}}); err != nil {
		return err
	}
	wc := make([]verbs.WC, 1)
	if _, err := b.Wait(ctx, wc); err != nil {
		return fmt.Errorf("%w; device %+v", err, dev.Stats())
	}
	if wc[0].Status != verbs.WCSuccess || wc[0].Imm != 0x600d {
		return fmt.Errorf("receive %+v", wc[0])
	}
	msg := b.MR.Buf()[:wc[0].ByteLen]
	for i := range msg {
		b.MR.Buf()[100+i] = msg[len(msg)-1-i]
	}
	_, err = b.QP.PostSend([]verbs.SendWR{
		{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: b.SGE(100, len(msg)), RemoteAddr: a.Addr + 200, RKey: a.RKey},
		{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: b.SGE(0, 0)}})
	if err != nil {
		return err
	}
	if _, err := b.Wait(ctx, wc); err != nil || wc[0].Status != verbs.WCSuccess {
		return fmt.Errorf("the SEND after the WRITE: %+v, %v", wc[0], err)
	}
	return nil
}
