package mcast

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

// queueLen is the most group datagrams waiting for Receive; more are
// dropped (Set.Drops).
const queueLen = 256

// Set is a packet path's joined groups. Its zero value is ready to use.
type Set struct {
	mu     sync.Mutex
	groups map[netip.Addr]*group
	q, out []packetio.Packet // waiting; handed to the last Take
	free   [][]byte
	ready  atomic.Bool
	drops  atomic.Uint64
}

type group struct {
	pc    *net.UDPConn
	joins int
}

// Path is what a Set needs of its packet path.
type Path struct {
	Name      string         // for errors: "packetio/udp"
	Local     netip.AddrPort // the path's address and port
	MaxPacket int
	// Netns returns a descriptor of the path's socket's network namespace
	// (ioctl SIOCGSKNS), which the Set closes.
	Netns func() (int, error)
	// Wake makes the path's Receive return, to take the queue.
	Wake func()
}

// Join joins group (see packetio.MulticastJoiner).
func (s *Set) Join(p *Path, g netip.Addr) error {
	g = g.Unmap()
	local := p.Local.Addr()
	switch {
	case !g.IsMulticast():
		return fmt.Errorf("%s: join %v: not a multicast address: %w", p.Name, g, packetio.ErrNotSupported)
	case g.Is6() != local.Is6():
		return fmt.Errorf("%s: join %v on a socket of %v: another address family: %w", p.Name, g, local, packetio.ErrNotSupported)
	case local.IsUnspecified():
		return fmt.Errorf("%s: join %v: the socket is bound to no address (its interface is unknown): %w", p.Name, g, packetio.ErrNotSupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.groups[g]; x != nil {
		x.joins++
		return nil
	}
	pc, err := openInNetns(p, g)
	if err != nil {
		return err
	}
	if s.groups == nil {
		s.groups = make(map[netip.Addr]*group)
	}
	s.groups[g] = &group{pc: pc, joins: 1}
	go s.read(p, pc, g)
	return nil
}

// Leave undoes one Join of group; the last leaves it.
func (s *Set) Leave(name string, g netip.Addr) error {
	g = g.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.groups[g]
	if x == nil {
		return fmt.Errorf("%s: leave %v: not joined: %w", name, g, packetio.ErrNotSupported)
	}
	if x.joins--; x.joins == 0 {
		delete(s.groups, g)
		x.pc.Close() // leaves the group; its reader ends
	}
	return nil
}

// Ready reports whether group datagrams wait.
func (s *Set) Ready() bool { return s.ready.Load() }

// Drops returns how many group datagrams the full queue dropped.
func (s *Set) Drops() uint64 { return s.drops.Load() }

// Take returns the group datagrams waiting (each with Local the group),
// valid until the next Take, and takes back the buffers of those it
// returned before.
func (s *Set) Take() []packetio.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.out {
		s.free = append(s.free, s.out[i].Buf[:cap(s.out[i].Buf)])
	}
	s.out, s.q = s.q, s.out[:0]
	s.ready.Store(false)
	return s.out
}

// Close closes every group's socket.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g, x := range s.groups {
		x.pc.Close()
		delete(s.groups, g)
	}
}

// read queues g's datagrams until pc is closed.
func (s *Set) read(p *Path, pc *net.UDPConn, g netip.Addr) {
	buf := make([]byte, p.MaxPacket)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.mu.Lock()
		if len(s.q) >= queueLen {
			s.mu.Unlock()
			s.drops.Add(1)
			continue
		}
		s.q = append(s.q, packetio.Packet{Buf: buf[:n], Addr: from.Addr().Unmap(), Port: from.Port(), Local: g})
		if k := len(s.free); k > 0 {
			buf, s.free = s.free[k-1], s.free[:k-1]
		} else {
			buf = make([]byte, p.MaxPacket)
		}
		s.ready.Store(true)
		s.mu.Unlock()
		p.Wake()
	}
}

// openInNetns opens g's socket in the network namespace of the path's
// socket (which need not be the calling thread's), on a thread of its own.
func openInNetns(p *Path, g netip.Addr) (*net.UDPConn, error) {
	type res struct {
		pc  *net.UDPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // not unlocked once moved: the thread then dies with the goroutine
		moved, err := enterNetns(p)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		pc, err := open(p, g)
		ch <- res{pc, err}
		if !moved {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.pc, r.err
}

// enterNetns moves the calling (locked) thread into the path's network
// namespace when it is another, and reports whether it did.
func enterNetns(p *Path) (bool, error) {
	nsfd, err := p.Netns()
	if err != nil {
		return false, fmt.Errorf("%s: the socket's network namespace: %w", p.Name, err)
	}
	defer unix.Close(nsfd)
	var a, b unix.Stat_t
	if unix.Fstat(nsfd, &a) == nil && unix.Stat("/proc/thread-self/ns/net", &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
		return false, nil
	}
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("%s: entering the socket's network namespace: %w", p.Name, err)
	}
	return true, nil
}

// SocketNetns returns a descriptor of the network namespace of the socket
// fd (ioctl SIOCGSKNS), for Path.Netns.
func SocketNetns(fd int) (int, error) { return unix.IoctlRetInt(fd, unix.SIOCGSKNS) }

// open opens a UDP socket bound to g and the path's port, joined to g on
// the interface holding the path's address.
func open(p *Path, g netip.Addr) (*net.UDPConn, error) {
	ifi, err := interfaceOf(p.Local.Addr())
	if err != nil {
		return nil, fmt.Errorf("%s: join %v: %w", p.Name, g, err)
	}
	fam := unix.AF_INET
	if g.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: join %v: socket: %w", p.Name, g, err)
	}
	f := os.NewFile(uintptr(fd), "udp-group:"+g.String())
	defer f.Close()
	if err := join(fd, g, p.Local.Port(), p.Local.Addr(), ifi); err != nil {
		return nil, fmt.Errorf("%s: join %v on %s: %w", p.Name, g, ifi.Name, err)
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("%s: join %v: %w", p.Name, g, err)
	}
	return pc.(*net.UDPConn), nil
}

// join binds fd to g and port and joins the group on ifi.
func join(fd int, g netip.Addr, port uint16, local netip.Addr, ifi *net.Interface) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if g.Is4() {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: g.As4()}); err != nil {
			return err
		}
		mr := &unix.IPMreqn{Multiaddr: g.As4(), Address: local.As4(), Ifindex: int32(ifi.Index)}
		return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mr)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		return err
	}
	// rdma_rxe sends IPv6 datagrams with UDP checksum 0.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(port), Addr: g.As16(), ZoneId: uint32(ifi.Index)}); err != nil {
		return err
	}
	mr := &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifi.Index)}
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
			pfx, err := netip.ParsePrefix(x.String())
			switch {
			case err != nil:
			case pfx.Addr().Unmap() == a:
				return &ifs[i], nil
			case within == nil && pfx.Masked().Contains(a):
				within = &ifs[i]
			}
		}
	}
	if within != nil {
		return within, nil
	}
	return nil, fmt.Errorf("no interface holds %v", a)
}
