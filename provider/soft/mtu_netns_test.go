package soft

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/verbs"
)

// mtuDevice creates a soft device inside ns on a UDP socket there, so that
// New finds the veth link (and its MTU) of addr.
func mtuDevice(t *testing.T, ns *netns.NS, addr netip.Addr, want verbs.MTU) (*Device, error) {
	t.Helper()
	var d *Device
	err := ns.Do(func() error {
		c, err := udp.Listen(addr, udp.Options{})
		if err != nil {
			return err
		}
		if d, err = New(Options{Name: "mtu-" + addr.String(), Conn: c, ActiveMTU: want}); err != nil {
			c.Close()
		}
		return err
	})
	if d != nil {
		t.Cleanup(func() { d.Close() })
	}
	return d, err
}

// TestActiveMTUFromLink: a soft device's active MTU follows the link it
// sends on, as rdma_rxe's follows its netdev: 1024 on a veth of MTU 1500,
// 4096 on one of 9000. On the 1500-byte link a 3000-byte WRITE goes in
// 1024-byte packets; a 4096 path MTU, which the link could not carry, is
// refused at RTR with an error naming both MTUs and the link, and so is an
// ActiveMTU of 4096; on the 9000-byte link the same WRITE goes as one
// packet.
func TestActiveMTUFromLink(t *testing.T) {
	for _, c := range []struct {
		linkMTU int
		want    verbs.MTU
	}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}} {
		t.Run("veth"+strconv.Itoa(c.linkMTU), func(t *testing.T) {
			pair := netns.NewPair(t, netns.Options{MTU: c.linkMTU})
			if c.want < verbs.MTU4096 {
				_, err := mtuDevice(t, pair.A, pair.AddrA, verbs.MTU4096)
				if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(err.Error(), "MTU "+strconv.Itoa(c.linkMTU)) {
					t.Errorf("ActiveMTU 4096 on a %d-byte link: %v, want ErrInvalidAttr naming the link's MTU", c.linkMTU, err)
				}
			}
			da, err := mtuDevice(t, pair.A, pair.AddrA, 0)
			must(t, err)
			db, err := mtuDevice(t, pair.B, pair.AddrB, 0)
			must(t, err)
			ends := [2]*mtuEnd{newMTUEnd(t, da), newMTUEnd(t, db)}
			for i, e := range ends {
				pa, err := e.ctx.QueryPort(1)
				must(t, err)
				if pa.ActiveMTU != c.want {
					t.Fatalf("device %d on a veth of MTU %d: ActiveMTU %v, want %v", i, c.linkMTU, pa.ActiveMTU, c.want)
				}
			}
			a, b := ends[0], ends[1]
			if c.want < verbs.MTU4096 {
				err := verbs.Connect(a.qp, a.ep, b.ep, &verbs.ConnectOptions{MTU: verbs.MTU4096})
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				if !errors.Is(err, verbs.ErrInvalidAttr) || !strings.Contains(msg, "path MTU 4096") ||
					!strings.Contains(msg, "active MTU 1024") || !strings.Contains(msg, "MTU "+strconv.Itoa(c.linkMTU)) {
					t.Fatalf("connect with path MTU 4096 on a %d-byte link: %v, want ErrInvalidAttr naming 4096, 1024 and %d", c.linkMTU, err, c.linkMTU)
				}
				must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
			}
			must(t, verbs.Connect(a.qp, a.ep, b.ep, nil))
			must(t, verbs.Connect(b.qp, b.ep, a.ep, nil))
			for i := range 3000 {
				a.mr.Buf()[i] = byte(i * 7)
			}
			_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 3000, LKey: a.mr.LKey()}}, RemoteAddr: b.ep.Addr, RKey: b.ep.RKey}})
			must(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wc := make([]verbs.WC, 1)
			if _, err := verbs.PollWait(ctx, a.ch, a.cq, wc); err != nil {
				t.Fatalf("WRITE of 3000 bytes: %v", err)
			}
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("WRITE of 3000 bytes on a %d-byte link: %v", c.linkMTU, wc[0].Status)
			}
			b.qp.Query() // the responder's writes happen before (race detector)
			for i := range 3000 {
				if b.mr.Buf()[i] != byte(i*7) {
					t.Fatalf("byte %d of the WRITE differs", i)
				}
			}
		})
	}
}

// mtuEnd is one side's objects for TestActiveMTUFromLink.
type mtuEnd struct {
	ctx verbs.Context
	ch  verbs.CompChannel
	cq  verbs.CQ
	mr  verbs.MR
	qp  verbs.QP
	ep  verbs.Endpoint
}

func newMTUEnd(t *testing.T, d *Device) *mtuEnd {
	t.Helper()
	e := &mtuEnd{}
	var err error
	e.ctx, err = d.Open()
	must(t, err)
	t.Cleanup(func() { e.ctx.Close() })
	pd, err := e.ctx.AllocPD()
	must(t, err)
	e.ch, err = e.ctx.CreateCompChannel()
	must(t, err)
	e.cq, err = e.ctx.CreateCQ(16, e.ch)
	must(t, err)
	e.mr, err = pd.RegMR(make([]byte, 8192), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	e.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	e.ep, err = verbs.NewEndpoint(e.ctx, e.qp, 1, 0)
	must(t, err)
	e.ep = e.ep.WithMR(e.mr)
	return e
}

// TestOversizedSend: a device that cannot know its link (made outside the
// namespace its socket lives in, so its active MTU comes from the packet
// path: 4096) connected with path MTU 4096 over a veth of MTU 1500: the
// kernel refuses the WRITE's 4 KiB packets (EMSGSIZE). That ends at once
// in an error completion, IBV_EVENT_QP_FATAL and an error naming the
// packet's size and the path MTU, not in RETRY_EXC_ERR after the retries.
func TestOversizedSend(t *testing.T) {
	pair := netns.NewPair(t, netns.Options{MTU: 1500})
	var devs [2]*Device
	for i, x := range []struct {
		ns   *netns.NS
		addr netip.Addr
	}{{pair.A, pair.AddrA}, {pair.B, pair.AddrB}} {
		var c *udp.Conn
		must(t, x.ns.Do(func() (err error) { c, err = udp.Listen(x.addr, udp.Options{}); return err }))
		d, err := New(Options{Name: "big" + strconv.Itoa(i), Conn: c}) // outside the namespace: no link found
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	a, b := newMTUEnd(t, devs[0]), newMTUEnd(t, devs[1])
	if a.ep.MTU != verbs.MTU4096 {
		t.Skipf("the device found its link (active MTU %v): nothing to refuse", a.ep.MTU)
	}
	must(t, verbs.Connect(a.qp, a.ep, b.ep, nil))
	must(t, verbs.Connect(b.qp, b.ep, a.ep, nil))
	start := time.Now()
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 6000, LKey: a.mr.LKey()}}, RemoteAddr: b.ep.Addr, RKey: b.ep.RKey}})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := verbs.PollWait(ctx, a.ch, a.cq, wc); err != nil {
		t.Fatalf("no completion: %v", err)
	}
	if wc[0].Status == verbs.WCSuccess || wc[0].Status == verbs.WCRetryExcErr {
		t.Fatalf("an oversized WRITE completed %v after %v, want an error status other than RETRY_EXC_ERR", wc[0].Status, time.Since(start))
	}
	ev, err := a.ctx.GetAsyncEvent(ctx)
	if err != nil || ev.Type != verbs.EventQPFatal || ev.QP != a.qp {
		t.Errorf("async event %v on %v, %v; want QP_FATAL on the QP", ev.Type, ev.QP, err)
	}
	why := a.qp.(*QP).Err()
	if why == nil || !strings.Contains(why.Error(), "EMSGSIZE") || !strings.Contains(why.Error(), "path MTU 4096") {
		t.Errorf("QP.Err() = %v, want the reason naming EMSGSIZE and the path MTU", why)
	}
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}}})
	if err == nil || !strings.Contains(err.Error(), "path MTU 4096") {
		t.Errorf("PostSend after: %v, want the error naming the path MTU", err)
	}
	t.Logf("%v after %v: %v", wc[0].Status, time.Since(start), why)
}
