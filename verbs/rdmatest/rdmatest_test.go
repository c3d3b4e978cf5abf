package rdmatest_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/rdmatest"
)

func TestRC(t *testing.T) {
	for _, path := range []string{rdmatest.Pipe, rdmatest.UDP} {
		t.Run(path, func(t *testing.T) {
			p := rdmatest.RC(t, &rdmatest.Options{Path: path})
			copy(p.A.Buf, "hello, B")
			p.B.PostRecv(t, 0, 64)
			p.A.Post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, SGList: p.A.SGE(0, 8), Imm: 42})
			if wc := p.A.WaitSend(t, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
				t.Fatalf("send: %+v", wc)
			}
			wc := p.B.WaitRecv(t, 1)[0]
			if wc.Status != verbs.WCSuccess || wc.ByteLen != 8 || wc.Imm != 42 || string(p.B.Buf[:8]) != "hello, B" {
				t.Fatalf("receive: %+v, %q", wc, p.B.Buf[:8])
			}
			// WRITE into B's memory through its Endpoint.
			copy(p.A.Buf[100:], "written")
			p.A.Post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: p.A.SGE(100, 7),
				RemoteAddr: p.B.Endpoint.Addr + 200, RKey: p.B.Endpoint.RKey})
			if wc := p.A.WaitSend(t, 1)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("write: %+v", wc)
			}
			p.B.Sync()
			if !bytes.Equal(p.B.Buf[200:207], []byte("written")) {
				t.Fatalf("B's memory: %q", p.B.Buf[200:207])
			}
		})
	}
}

func TestUD(t *testing.T) {
	p := rdmatest.UD(t, nil)
	copy(p.B.Buf, "datagram")
	p.A.PostRecv(t, 0, 40+64)
	p.B.Post(t, verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.B.SGE(0, 8)})
	if wc := p.B.WaitSend(t, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("send: %+v", wc)
	}
	wc := p.A.WaitRecv(t, 1)[0]
	if wc.Status != verbs.WCSuccess || wc.ByteLen != 40+8 || wc.SrcQP != p.B.QP.Num() || string(p.A.Buf[40:48]) != "datagram" {
		t.Fatalf("receive: %+v, %q", wc, p.A.Buf[40:48])
	}
}

// TestOptions: the devices take Options.Device (here a smaller active MTU
// and busy polling), the addresses given, and another packet path.
func TestOptions(t *testing.T) {
	for _, path := range []string{rdmatest.Pipe, rdmatest.UDP, "uring"} {
		t.Run(path, func(t *testing.T) {
			o := &rdmatest.Options{Path: path, Device: soft.Options{ActiveMTU: verbs.MTU512, Busy: true}}
			switch path {
			case rdmatest.Pipe:
				o.AddrA, o.AddrB = netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("192.0.2.8")
			default:
				o.AddrA, o.AddrB = netip.MustParseAddr("127.0.31.1"), netip.MustParseAddr("127.0.31.2")
			}
			p := rdmatest.RC(t, o)
			if p.A.Device.Addr() != o.AddrA || p.B.Device.Addr() != o.AddrB {
				t.Fatalf("addresses %v, %v; want %v, %v", p.A.Device.Addr(), p.B.Device.Addr(), o.AddrA, o.AddrB)
			}
			pa, err := p.A.Ctx.QueryPort(1)
			if err != nil || pa.ActiveMTU != verbs.MTU512 {
				t.Fatalf("port: %+v, %v; want active MTU 512", pa, err)
			}
			// A message of three 512-byte packets crosses.
			p.B.PostRecv(t, 0, 1500)
			p.A.Post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: p.A.SGE(0, 1500)})
			if wc := p.B.WaitRecv(t, 1)[0]; wc.Err() != nil || wc.ByteLen != 1500 {
				t.Fatalf("receive: %+v", wc)
			}
		})
	}
}
