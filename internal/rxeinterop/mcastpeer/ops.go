package main

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// receive attaches to the group and takes -n messages: each a SEND with
// immediate data equal to its source QPN (as mckey sends), -size bytes
// after the 40-byte GRH, whose destination is the group.
func (e *end) receive(g netip.Addr) error {
	slot := 40 + *size
	for i := 0; i < *count; i++ {
		sge := []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*slot), Length: uint32(slot), LKey: e.mr.LKey()}}
		if _, err := e.qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: sge}}); err != nil {
			return err
		}
	}
	if err := e.qp.(verbs.McastAttacher).AttachMcast(e.groupG, 0); err != nil {
		return err
	}
	fmt.Printf("attached QP %#x to %v\n", e.qp.Num(), g)
	wcs, err := e.wait(*count)
	for _, w := range wcs {
		grh := e.buf[int(w.WRID)*slot : int(w.WRID)*slot+40]
		dst := netip.AddrFrom4([4]byte(grh[36:40])).String()
		if g.Is6() {
			dst = netip.AddrFrom16([16]byte(grh[24:40])).String()
		}
		fmt.Printf("recv %d: %v, %d bytes from QP %#x, imm %#x, GRH to %s\n", w.WRID, w.Status, w.ByteLen, w.SrcQP, w.Imm, dst)
		if w.Status != verbs.WCSuccess || w.ByteLen != uint32(slot) || w.Flags&verbs.WCFlagWithImm == 0 ||
			w.Imm != w.SrcQP || dst != g.String() {
			return fmt.Errorf("receive %d: %+v: want %d bytes with the sender's QPN as immediate data, to %v", w.WRID, w, slot, g)
		}
	}
	if err != nil {
		return err
	}
	return e.qp.(verbs.McastAttacher).DetachMcast(e.groupG, 0)
}

// sendAll sends -n SENDs with immediate data (its QPN) to the group's GID
// and QPN 0xFFFFFF.
func (e *end) sendAll() error {
	ah, err := e.pd.CreateAH(&verbs.AHAttr{DGID: e.groupG, SGIDIndex: uint8(e.gidx), PortNum: 1, HopLimit: 1})
	if err != nil {
		return err
	}
	defer ah.Destroy()
	for i := range e.buf[:*size] {
		e.buf[i] = byte(i)
	}
	for i := 0; i < *count; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: e.qp.Num(),
			SGList: []verbs.SGE{{Addr: e.mr.Addr(), Length: uint32(*size), LKey: e.mr.LKey()}}, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: rdmaUDPQKey}
		if _, err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			return err
		}
		wcs, err := e.wait(1)
		if err != nil {
			return err
		}
		if wcs[0].Status != verbs.WCSuccess {
			return fmt.Errorf("send %d: %v", i, wcs[0].Status)
		}
	}
	fmt.Printf("sent %d messages of %d bytes from QP %#x to the group\n", *count, *size, e.qp.Num())
	return nil
}
