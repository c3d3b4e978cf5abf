//go:build linux

package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cm/rdmacm"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

func newLossyDev(t *testing.T, addr string, seed uint64) (*soft.Device, *fault.Conn) {
	t.Helper()
	c, err := udp.Listen(netip.MustParseAddr(addr), udp.Options{})
	if err != nil {
		t.Skipf("UDP socket on %v: %v", addr, err)
	}
	fc := fault.New(c, fault.Options{Seed: seed, Drop: 0.2, Duplicate: 0.05, Reorder: 0.05})
	d, err := soft.New(soft.Options{Conn: fc})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, fc
}

// TestLossy opens and closes connections while a fifth of every packet
// (CM MADs included) is dropped, and some duplicated or reordered, both
// ways: every connection is made, carries a SEND, and closes; resends do
// the work; nothing is left behind.
func TestLossy(t *testing.T) {
	devA, fa := newLossyDev(t, "127.0.10.20", 1)
	devB, fb := newLossyDev(t, "127.0.10.21", 2)
	cfg := rdmacm.MachineConfig{ResponseTimeout: 14, PacketLifeTime: 10, ACKTimeout: 12, TimeWait: int64(50 * time.Millisecond)}
	mgA, mgB := rdmacm.Attach(devA, cfg), rdmacm.Attach(devB, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l, err := rdmacm.Listen(ctx, devB, ":7174")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	serverErr := make(chan error, 1)
	go func() {
		k := 0
		for {
			req, err := l.Accept(ctx)
			if err != nil {
				serverErr <- nil
				return
			}
			s := newSideNoCleanup(devB)
			rdmacm.InitQP(s.qp)
			s.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGList: []verbs.SGE{{Addr: s.mr.Addr(), Length: 64, LKey: s.mr.LKey()}}}})
			c, err := req.Accept(ctx, s.qp, rdmacm.AcceptOptions{})
			if err != nil {
				t.Logf("server: accept: %v", err)
				s.close()
				continue
			}
			t.Logf("server: connection %d up", k)
			<-c.Done()
			t.Logf("server: connection %d down: %v", k, c.Err())
			k++
			c.Close()
			s.close()
		}
	}()
	const n = 30
	for i := range n {
		s := newSideNoCleanup(devA)
		c, err := rdmacm.Dial(ctx, devA, "127.0.10.21:7174", s.qp, rdmacm.DialOptions{})
		if err != nil {
			t.Fatalf("connection %d: %v\nA %+v\nB %+v", i, err, mgA.Stats(), mgB.Stats())
		}
		if _, err := s.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{{Addr: s.mr.Addr(), Length: 8, LKey: s.mr.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
		wc := make([]verbs.WC, 1)
		for s.cq.Poll(wc) == 0 && ctx.Err() == nil {
			time.Sleep(50 * time.Microsecond)
		}
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("connection %d: SEND %v", i, wc[0].Status)
		}
		c.Close()
		s.close()
	}
	for deadline := time.Now().Add(10 * time.Second); mgA.Stats().Conns+mgB.Stats().Conns != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("connections left: %d %d", mgA.Stats().Conns, mgB.Stats().Conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.Close()
	if err := <-serverErr; err != nil {
		t.Fatal(err)
	}
	sa, sb := mgA.Stats().Machine, mgB.Stats().Machine
	t.Logf("faults A %+v B %+v", fa.FaultStats(), fb.FaultStats())
	t.Logf("CM A %+v", sa)
	t.Logf("CM B %+v", sb)
	if sa.Resent+sb.Resent == 0 {
		t.Error("no CM message was resent: the loss did not reach the CM")
	}
}
