package udp

import (
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
)

// Offloads reports whether the Conn uses GSO and GRO, and why not when it
// does not. GSO may turn off while the Conn runs (a device that cannot
// checksum in hardware makes the kernel refuse GSO with EIO before Linux
// 6.11); it is safe to call from any goroutine.
func (c *Conn) Offloads() OffloadStatus { return c.off.Status() }

// txCtlSpace is the control room of one sendmmsg entry: a UDP_SEGMENT
// cmsg and the TOS and TTL ones (udpsock.PutIPCmsgs).
var txCtlSpace = udpsock.GSOCmsgSpace + udpsock.IPCmsgSpace

// txMsgs is a list of sendmmsg entries: hdrs[m] sends the packets whose
// iovecs are txIovs[k[m]:k[m]+n[m]], as one GSO message when n[m] > 1.
type txMsgs struct {
	hdrs []mmsghdr
	k, n []int
}

func newTxMsgs(n int) txMsgs {
	return txMsgs{hdrs: make([]mmsghdr, n), k: make([]int, n), n: make([]int, n)}
}

// gsoRun returns how many packets from k on (at most end) go in one GSO
// message (udpsock.GSORun), 1 when GSO is off.
func (c *Conn) gsoRun(k, end int) int {
	if !c.off.GSO() {
		return 1
	}
	return udpsock.GSORun(c.txLen, c.txAddr, k, end)
}

// buildMsgs makes the sendmmsg entries, from entry m on, of the packets
// k to end (one socket's; see txIov0 for their iovecs), and returns the next free
// entry. A GSO message gets a UDP_SEGMENT cmsg with its segment size, and
// the ICRC of its segment j (which leaves with IPv4 Identification j) is
// rewritten from Identification 0 to j.
func (c *Conn) buildMsgs(m, k, end int) int {
	for k < end {
		n := c.gsoRun(k, end)
		h := &c.txm.hdrs[m]
		d := &c.txAddr[k]
		h.hdr.Namelen = c.txNames[m].Set(netip.AddrFrom16(d.Addr))
		h.hdr.Iov = &c.txIovs[c.txIov0[k]]
		h.hdr.SetIovlen(c.txIov0[k+n] - c.txIov0[k])
		h.hdr.Control, h.hdr.Controllen = nil, 0
		ctl := c.txCtl[m*txCtlSpace : (m+1)*txCtlSpace]
		cl := 0
		if n > 1 {
			udpsock.PutSegmentCmsg(ctl, uint16(c.txLen[k]))
			cl = udpsock.GSOCmsgSpace
			for j := 1; j < n && !c.v6; j++ { // IPv6 has no Identification
				c.ids.ChangeIDOf(c.txICRC(k+j), c.txLen[k+j], 0, uint16(j))
			}
		}
		if d.TOS != 0 || d.TTL != 0 {
			cl += udpsock.PutIPCmsgs(ctl[cl:], c.v6, d.TOS, d.TTL)
		}
		if cl > 0 {
			h.setControl(ctl[:cl])
		}
		c.txm.k[m], c.txm.n[m] = k, n
		m++
		k += n
	}
	return m
}

// txICRC returns the ICRC of packet k (udpsock.ICRCOf its last iovec).
func (c *Conn) txICRC(k int) []byte { return udpsock.ICRCOf(&c.txIovs[c.txIov0[k+1]-1]) }

// gsoFallback sends the packets of the GSO message m that the kernel
// refused with errno one datagram each, their ICRCs restored for
// Identification 0, and counts the fallback. EIO turns GSO off for the
// Conn: the device cannot do it at all.
func (c *Conn) gsoFallback(raw syscall.RawConn, m int, errno unix.Errno, pkts []packetio.Packet, fail *packetio.TxFailures) (sent int, bytes uint64) {
	k, n := c.txm.k[m], c.txm.n[m]
	for j := 1; j < n && !c.v6; j++ {
		c.ids.ChangeIDOf(c.txICRC(k+j), c.txLen[k+j], uint16(j), 0)
	}
	// The message's TOS and TTL control messages, after its UDP_SEGMENT.
	ipCtl := c.txCtl[m*txCtlSpace+udpsock.GSOCmsgSpace : m*txCtlSpace+int(c.txm.hdrs[m].hdr.Controllen)]
	c.ctr.GSOFallbacks.Add(1)
	c.off.TurnOffGSO(errno)
	fb := &c.txFb
	for j := range n {
		h := &fb.hdrs[j]
		h.setName(&c.txNames[m])
		h.hdr.Namelen = c.txm.hdrs[m].hdr.Namelen
		h.hdr.Iov = &c.txIovs[c.txIov0[k+j]]
		h.hdr.SetIovlen(c.txIov0[k+j+1] - c.txIov0[k+j])
		h.hdr.Control, h.hdr.Controllen = nil, 0
		if len(ipCtl) > 0 {
			h.setControl(ipCtl)
		}
		fb.k[j], fb.n[j] = k+j, 1
	}
	return c.sendMsgs(raw, fb, 0, n, pkts, fail)
}
