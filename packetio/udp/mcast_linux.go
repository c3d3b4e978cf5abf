package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
)

var _ packetio.MulticastJoiner = (*Conn)(nil)

// mcastQueue is the most group datagrams waiting for Receive; more are
// dropped (counted in the set's drops).
const mcastQueue = 256

// mcastSet is a Conn's multicast groups. The Conn's socket is bound to its
// unicast address, which the kernel does not deliver group datagrams to:
// each joined group has a socket of its own, bound to the group's address
// and the Conn's port in the Conn's network namespace, and a goroutine
// reading it into a queue that Receive empties before it reads its own
// socket (one atomic load when no group datagram waits). Group datagrams
// are few (UD multicast carries no bulk data): their buffers come from a
// free list, and the queue is bounded.
type mcastSet struct {
	mu     sync.Mutex
	groups map[netip.Addr]*mcastGroup
	q, out []packetio.Packet // waiting; handed to the last Receive
	free   [][]byte
	ready  atomic.Bool
	drops  atomic.Uint64
}

type mcastGroup struct {
	pc    *net.UDPConn
	joins int
}

// JoinGroup implements packetio.MulticastJoiner: group, an IPv4 or IPv6
// multicast address of the Conn's family, is joined on the interface that
// holds the Conn's address.
func (c *Conn) JoinGroup(group netip.Addr) error {
	group = group.Unmap()
	local := c.local.Addr()
	switch {
	case !group.IsMulticast():
		return fmt.Errorf("packetio/udp: join %v: not a multicast address: %w", group, packetio.ErrNotSupported)
	case group.Is6() != c.v6:
		return fmt.Errorf("packetio/udp: join %v on a socket of %v: another address family: %w", group, local, packetio.ErrNotSupported)
	case local.IsUnspecified():
		return fmt.Errorf("packetio/udp: join %v: the socket is bound to no address (its interface is unknown): %w", group, packetio.ErrNotSupported)
	}
	if c.closed.Load() {
		return packetio.ErrClosed
	}
	m := &c.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.groups[group]; g != nil {
		g.joins++
		return nil
	}
	pc, err := c.groupSocket(group)
	if err != nil {
		return err
	}
	if m.groups == nil {
		m.groups = make(map[netip.Addr]*mcastGroup)
	}
	m.groups[group] = &mcastGroup{pc: pc, joins: 1}
	go c.readGroup(pc, group)
	return nil
}

// LeaveGroup implements packetio.MulticastJoiner.
func (c *Conn) LeaveGroup(group netip.Addr) error {
	group = group.Unmap()
	m := &c.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil {
		return fmt.Errorf("packetio/udp: leave %v: not joined: %w", group, packetio.ErrNotSupported)
	}
	if g.joins--; g.joins == 0 {
		delete(m.groups, group)
		g.pc.Close() // leaves the group; its reader ends
	}
	return nil
}

// groupSocket opens group's socket in the network namespace of the Conn's
// socket (which need not be the calling thread's), joined on the
// interface holding the Conn's address.
func (c *Conn) groupSocket(group netip.Addr) (*net.UDPConn, error) {
	type res struct {
		pc  *net.UDPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: a thread moved to another namespace dies with the goroutine
		moved, err := c.enterNetns()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		pc, err := c.openGroup(group)
		ch <- res{pc, err}
		if !moved {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.pc, r.err
}

// enterNetns moves the calling (locked) thread into the network namespace
// of the Conn's socket, when it is another, and reports whether it did.
func (c *Conn) enterNetns() (bool, error) {
	var nsfd int
	var ioErr error
	err := c.raw.Control(func(fd uintptr) {
		nsfd, ioErr = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return false, fmt.Errorf("packetio/udp: the socket's network namespace: %w", err)
	}
	defer unix.Close(nsfd)
	var a, b unix.Stat_t
	if unix.Fstat(nsfd, &a) == nil && unix.Stat("/proc/thread-self/ns/net", &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
		return false, nil
	}
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("packetio/udp: entering the socket's network namespace: %w", err)
	}
	return true, nil
}

// openGroup opens a UDP socket bound to group and the Conn's port, joined
// to group on the interface holding the Conn's address.
func (c *Conn) openGroup(group netip.Addr) (*net.UDPConn, error) {
	ifi, err := interfaceOf(c.local.Addr())
	if err != nil {
		return nil, fmt.Errorf("packetio/udp: join %v: %w", group, err)
	}
	fam := unix.AF_INET
	if c.v6 {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packetio/udp: join %v: socket: %w", group, err)
	}
	f := os.NewFile(uintptr(fd), "udp-group:"+group.String())
	defer f.Close()
	if err := joinFD(fd, group, c.local, ifi); err != nil {
		return nil, fmt.Errorf("packetio/udp: join %v on %s: %w", group, ifi.Name, err)
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("packetio/udp: join %v: %w", group, err)
	}
	return pc.(*net.UDPConn), nil
}

// joinFD binds fd to group and local's port and joins the group on ifi.
func joinFD(fd int, group netip.Addr, local netip.AddrPort, ifi *net.Interface) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if group.Is4() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: group.As4()}); err != nil {
			return err
		}
		mr := &unix.IPMreqn{Multiaddr: group.As4(), Address: local.Addr().As4(), Ifindex: int32(ifi.Index)}
		return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mr)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		return err
	}
	// rdma_rxe sends IPv6 datagrams with UDP checksum 0.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(local.Port()), Addr: group.As16(), ZoneId: uint32(ifi.Index)}); err != nil {
		return err
	}
	mr := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifi.Index)}
	return unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mr)
}

// interfaceOf returns the interface holding a: the one with a itself, else
// the one whose prefix holds it (127.0.12.1 on lo's 127.0.0.0/8).
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var within *net.Interface
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			p, err := netip.ParsePrefix(x.String())
			switch {
			case err != nil:
			case p.Addr().Unmap() == a:
				return &ifs[i], nil
			case within == nil && p.Masked().Contains(a):
				within = &ifs[i]
			}
		}
	}
	if within != nil {
		return within, nil
	}
	return nil, fmt.Errorf("no interface holds %v", a)
}

// readGroup queues group's datagrams for Receive until pc is closed.
func (c *Conn) readGroup(pc *net.UDPConn, group netip.Addr) {
	m := &c.mc
	buf := make([]byte, c.maxPacket)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m.mu.Lock()
		if len(m.q) >= mcastQueue {
			m.mu.Unlock()
			m.drops.Add(1)
			continue
		}
		m.q = append(m.q, packetio.Packet{Buf: buf[:n], Addr: from.Addr().Unmap(), Port: from.Port(), Local: group})
		if k := len(m.free); k > 0 {
			buf, m.free = m.free[k-1], m.free[:k-1]
		} else {
			buf = make([]byte, c.maxPacket)
		}
		m.ready.Store(true)
		m.mu.Unlock()
		c.Wake()
	}
}

// take hands Receive the group datagrams waiting, taking back the buffers
// of those it handed before.
func (m *mcastSet) take() []packetio.Packet {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.out {
		m.free = append(m.free, m.out[i].Buf[:cap(m.out[i].Buf)])
	}
	m.out, m.q = m.q, m.out[:0]
	m.ready.Store(false)
	return m.out
}

// close closes every group's socket.
func (m *mcastSet) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, x := range m.groups {
		x.pc.Close()
		delete(m.groups, g)
	}
}
