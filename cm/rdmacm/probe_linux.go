//go:build linux

package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// QP 1's Q_Key and number, as every CM MAD travels (engine.GSIQKey).
const (
	gsiQKey = 0x80010000
	gsiQPN  = 1
)

// pathProbe sends a dial's REQs from a kernel UDP socket of its own (from
// the device's address, a port the kernel picks, to the peer's port 4791:
// the peer answers to port 4791, the device's, as RoCE does), so that the
// kernel tells what became of them: a send that fails at once (no route:
// ENETUNREACH, EHOSTUNREACH) and the ICMP errors that come back (port
// unreachable: no RoCE device at the address; host or network
// unreachable), read from the socket's error queue (IP_RECVERR).
type pathProbe struct {
	conn    *net.UDPConn
	raw     syscall.RawConn
	fl      wire.Flow
	mu      sync.Mutex // the packet buffer and PSN
	buf     []byte
	psn     wire.PSN
	errs    chan error
	done    chan struct{}
	sent    atomic.Int64 // MADs the kernel took
	refused atomic.Int64 // MADs the kernel refused
}

// openProbe opens the probe of a dial from local to peer, or returns nil
// when it cannot (the address is not the calling thread's network
// namespace's: the REQs then leave through the device).
func openProbe(local, peer netip.Addr) *pathProbe {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1); serr == nil {
				// DF set, Identification 0: the header the ICRC is computed for.
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(local, 0).String())
	if err != nil {
		return nil
	}
	conn := pc.(*net.UDPConn)
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil
	}
	sport := conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	p := &pathProbe{conn: conn, raw: raw, fl: wire.Flow{Src: local, Dst: peer, SrcPort: sport},
		buf: make([]byte, 0, 512), errs: make(chan error, 16), done: make(chan struct{})}
	go p.readErrors()
	return p
}

// send sends a MAD to the peer's QP 1. An error is the kernel's refusal
// to send (no route), which also goes to errs.
func (p *pathProbe) send(mad []byte) {
	p.mu.Lock()
	h := wire.Header{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: gsiQPN, PSN: p.psn, AckReq: true,
		DETH: wire.DETHFields{QKey: gsiQKey, SrcQP: gsiQPN}}
	p.psn = p.psn.Add(1)
	pkt, err := wire.AppendDatagram(p.buf[:0], &p.fl, &h, mad)
	if err == nil {
		_, err = p.conn.WriteToUDPAddrPort(pkt, netip.AddrPortFrom(p.fl.Dst, wire.RoCEv2Port))
	}
	p.mu.Unlock()
	if err != nil {
		p.refused.Add(1)
		p.report(&PathError{Peer: p.fl.Dst, Err: unwrapErrno(err)})
		return
	}
	p.sent.Add(1)
}

// filtering reports whether a local firewall's refusals (PathError.filtered)
// of the probe's MADs are a drop among sends that pass rather than a rule
// that refuses them all: the kernel took one, or it refused fewer than
// filteredRefusals (a rule dropping a third of them at random refuses
// that many in a row once in 729 dials; a rule refusing all fails the
// dial within about half a second of quick resends).
func (p *pathProbe) filtering() bool {
	return p.sent.Load() > 0 || p.refused.Load() < filteredRefusals
}

const filteredRefusals = 6

func (p *pathProbe) report(err error) {
	select {
	case p.errs <- err:
	default:
	}
}

// readErrors reads the socket's error queue until the probe closes.
func (p *pathProbe) readErrors() {
	defer close(p.done)
	var data [64]byte
	oob := make([]byte, 512)
	for {
		var perr *PathError
		err := p.raw.Read(func(fd uintptr) bool {
			_, oobn, _, _, rerr := unix.Recvmsg(int(fd), data[:], oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if rerr == unix.EAGAIN {
				return false
			}
			if rerr == nil {
				perr = parseRecvErr(oob[:oobn], p.fl.Dst)
			}
			return true
		})
		if err != nil {
			return // closed
		}
		if perr != nil {
			p.report(perr)
		}
	}
}

// parseRecvErr reads the IP_RECVERR control message of an error queue
// entry.
func parseRecvErr(oob []byte, peer netip.Addr) *PathError {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if m.Header.Level != unix.IPPROTO_IP || m.Header.Type != unix.IP_RECVERR ||
			len(m.Data) < int(unsafe.Sizeof(unix.SockExtendedErr{})) {
			continue
		}
		ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
		pe := &PathError{Peer: peer, Err: syscall.Errno(ee.Errno)}
		if ee.Origin == unix.SO_EE_ORIGIN_ICMP {
			pe.ICMP, pe.ICMPType, pe.ICMPCode = true, ee.Type, ee.Code
			if off := int(unsafe.Sizeof(*ee)); len(m.Data) >= off+8 {
				var a [4]byte
				copy(a[:], m.Data[off+4:off+8]) // the offender: a sockaddr_in's address
				pe.From = netip.AddrFrom4(a)
			}
		}
		return pe
	}
	return nil
}

func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func (p *pathProbe) close() {
	p.conn.Close()
	<-p.done
}

// String names the probe's flow, for errors.
func (p *pathProbe) String() string { return fmt.Sprintf("%v -> %v", p.fl.Src, p.fl.Dst) }
