// Command mcastpeer is goroce's end of rxeinterop's TestMcastRxe: a soft
// device's UD QP that receives from, or sends to, an IP multicast group
// as rdma-core's mckey does on rdma_rxe (rdma_join_multicast: the group's
// IPv4-mapped GID, QPN 0xFFFFFF, rdma_cm's UD Q_Key 0x01234567, SEND with
// immediate data holding the sender's QPN).
//
// -recv attaches the QP to the group, prints "attached", and waits for -n
// messages, printing each; -send sends -n messages of -size bytes to the
// group. It exits 0 when all went (or came) as they should.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

// rdmaUDPQKey is the Q_Key rdma_cm gives UD QPs of RDMA_PS_UDP.
const rdmaUDPQKey = 0x01234567

var (
	addr    = flag.String("addr", "", "the device's address")
	group   = flag.String("group", "239.1.1.1", "the multicast group")
	recv    = flag.Bool("recv", false, "receive (attach to the group)")
	send    = flag.Bool("send", false, "send to the group")
	count   = flag.Int("n", 5, "messages")
	size    = flag.Int("size", 100, "bytes a message")
	timeout = flag.Duration("timeout", 60*time.Second, "give up after")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
	fmt.Println("PASS")
}

type end struct {
	ctx    verbs.Context
	pd     verbs.PD
	cq     verbs.CQ
	qp     verbs.QP
	mr     verbs.MR
	buf    []byte
	gidx   int
	groupG verbs.GID
}

func run() error {
	g, err := netip.ParseAddr(*group)
	if err != nil || !g.IsMulticast() {
		return fmt.Errorf("-group %q: not a multicast address", *group)
	}
	if *recv == *send {
		return errors.New("give one of -recv and -send")
	}
	d, _, err := soft.Open(soft.OpenOptions{Name: "mc", Addr: *addr, Path: "udp"})
	if err != nil {
		return err
	}
	defer d.Close()
	e, err := setup(d, g)
	if err != nil {
		return err
	}
	if *recv {
		return e.receive(g)
	}
	return e.sendAll()
}

func setup(d *soft.Device, g netip.Addr) (*end, error) {
	e := &end{gidx: d.GIDIndex(), groupG: verbs.GIDFromAddr(g), buf: make([]byte, *count*(40+*size)+4096)}
	var err error
	if e.ctx, err = d.Open(); err != nil {
		return nil, err
	}
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = e.ctx.CreateCQ(2*(*count)+2, nil); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.RegMR(e.buf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, QPType: verbs.QPTUD,
		Cap: verbs.QPCap{MaxSendWR: uint32(*count) + 1, MaxRecvWR: uint32(*count) + 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: rdmaUDPQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// wait polls n completions from the CQ.
func (e *end) wait(n int) ([]verbs.WC, error) {
	var out []verbs.WC
	wc := make([]verbs.WC, 8)
	for deadline := time.Now().Add(*timeout); len(out) < n; {
		k := e.cq.Poll(wc[:min(len(wc), n-len(out))])
		out = append(out, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				return out, fmt.Errorf("%d of %d completions after %v", len(out), n, *timeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return out, nil
}
