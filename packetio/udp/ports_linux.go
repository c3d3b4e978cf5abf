package udp

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/internal/udpsock"
	"github.com/goroce/goroce/wire"
)

// Sending from other source ports (packetio.SourcePorts): a packet whose
// Port is neither 0 nor the Conn's own port goes out on an extra socket
// bound to the Conn's address and that port. The extra sockets live in a
// cache of at most Options.SourcePorts, the least recently used closed to
// make room; they receive nothing (a filter drops every datagram that
// reaches them before it is queued, and their receive buffer is the
// smallest the kernel allows) and are configured as the main socket is for
// sending (IP_PMTUDISC_DO: DF set and Identification 0, which the ICRC
// covers; SO_NO_CHECK unless GSO is on; the TOS). A port that cannot be
// bound (another socket holds it) is remembered for retryBind; its packets
// meanwhile go out on the main socket with their ICRC recomputed for the
// main socket's port, counted in Stats().SourcePortFallbacks. The sockets are opened in the
// main socket's network namespace, whichever thread's namespace the
// Transmit that needs one runs in.

// retryBind is how long a port that could not be bound is left alone
// before binding it is tried again.
const retryBind = time.Second

// portSock is an extra socket, or the memory of a port that failed.
type portSock struct {
	port       uint16
	f          *os.File // nil when binding failed
	raw        syscall.RawConn
	retryAt    time.Duration // failed: since c.start, when to try again
	prev, next int           // LRU list of indices; -1 ends it
	gen        uint64        // the Transmit that last grouped it
	group      int           // its group in that Transmit
}

// portCache is the extra sockets by port, in least-recently-used order.
type portCache struct {
	max        int
	idx        []int16 // by port: 1 + index in ents, 0 none (allocated on first use)
	ents       []portSock
	head, tail int // most and least recently used; -1 when empty
	netns      int // the main socket's network namespace (SIOCGSKNS), or -1
	start      time.Time
	recvBuffer int // SO_RCVBUF of the extra sockets
	tos        uint8
	checksum   bool // send UDP checksums (GSO): no SO_NO_CHECK
}

func (pc *portCache) init(maxSocks int, fd int, tos uint8, checksum bool) {
	pc.max, pc.head, pc.tail, pc.netns, pc.start, pc.tos, pc.checksum = maxSocks, -1, -1, -1, time.Now(), tos, checksum
	if ns, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS); err == nil {
		unix.CloseOnExec(ns)
		pc.netns = ns
	}
}

// unlink takes entry i out of the LRU list.
func (pc *portCache) unlink(i int) {
	e := &pc.ents[i]
	if e.prev >= 0 {
		pc.ents[e.prev].next = e.next
	} else {
		pc.head = e.next
	}
	if e.next >= 0 {
		pc.ents[e.next].prev = e.prev
	} else {
		pc.tail = e.prev
	}
}

// front makes entry i the most recently used.
func (pc *portCache) front(i int) {
	e := &pc.ents[i]
	e.prev, e.next = -1, pc.head
	if pc.head >= 0 {
		pc.ents[pc.head].prev = i
	}
	pc.head = i
	if pc.tail < 0 {
		pc.tail = i
	}
}

// get returns the extra socket of port, opening it (or trying again to)
// when needed; its f is nil when the port could not be bound. It returns
// nil when the cache is full of sockets the Transmit gen already uses (a
// batch with more ports than Options.SourcePorts). It reports whether a
// socket was opened.
func (pc *portCache) get(c *Conn, port uint16, gen uint64) (e *portSock, opened bool) {
	if pc.idx == nil {
		pc.idx = make([]int16, 1<<16)
		pc.ents = make([]portSock, 0, pc.max)
	}
	if j := pc.idx[port]; j > 0 {
		i := int(j) - 1
		e = &pc.ents[i]
		if i != pc.head {
			pc.unlink(i)
			pc.front(i)
		}
		if e.f == nil && time.Since(pc.start) >= e.retryAt {
			opened = pc.open(c, e)
		}
		return e, opened
	}
	var i int
	if len(pc.ents) < pc.max {
		i = len(pc.ents)
		pc.ents = append(pc.ents, portSock{})
	} else {
		i = pc.tail
		if pc.ents[i].gen == gen {
			return nil, false // every socket is in use by this batch
		}
		pc.unlink(i)
		old := &pc.ents[i]
		pc.idx[old.port] = 0
		if old.f != nil {
			old.f.Close()
		}
	}
	pc.ents[i] = portSock{port: port}
	pc.idx[port] = int16(i + 1)
	pc.front(i)
	e = &pc.ents[i]
	return e, pc.open(c, e)
}

// open binds e's port; on failure e.f stays nil until retryAt.
func (pc *portCache) open(c *Conn, e *portSock) bool {
	fd, err := pc.socket(c.local.Addr(), e.port)
	if err == nil {
		f := os.NewFile(uintptr(fd), "udp4:"+netip.AddrPortFrom(c.local.Addr(), e.port).String())
		var raw syscall.RawConn
		if raw, err = f.SyscallConn(); err == nil {
			e.f, e.raw = f, raw
			return true
		}
		f.Close()
	}
	e.f, e.raw = nil, nil
	e.retryAt = time.Since(pc.start) + retryBind
	return false
}

// socket opens a sending socket bound to local and port in the main
// socket's network namespace.
func (pc *portCache) socket(local netip.Addr, port uint16) (int, error) {
	open := func() (int, error) {
		fd, _, err := udpsock.Open("packetio/udp", local, udpsock.Config{
			Port: int(port), RecvBuffer: pc.recvBuffer, SendBuffer: -1, TOS: pc.tos, NonBlock: true,
			Checksum: pc.checksum,
		})
		if err != nil {
			return -1, err
		}
		// Nothing is received here: drop every datagram before it is
		// queued (a filter returning 0 bytes). Without the filter the
		// smallest receive buffer bounds what queues.
		drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
		unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &drop[0]})
		return fd, nil
	}
	if pc.netns < 0 {
		return open()
	}
	runtime.LockOSThread()
	same, err := sameNetns(pc.netns)
	if err == nil && same {
		fd, err := open()
		runtime.UnlockOSThread()
		return fd, err
	}
	runtime.UnlockOSThread()
	// This thread is in another namespace: open the socket on a thread of
	// its own switched into the main socket's, as the main socket was.
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // discarded with the goroutine unless it switches back
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{-1, fmt.Errorf("packetio/udp: %w", err)}
			return
		}
		defer orig.Close()
		if err := unix.Setns(pc.netns, unix.CLONE_NEWNET); err != nil {
			done <- result{-1, fmt.Errorf("packetio/udp: setns: %w", err)}
			return
		}
		fd, err := open()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{fd, err}
	}()
	r := <-done
	return r.fd, r.err
}

// sameNetns reports whether the calling (locked) thread is in the network
// namespace nsfd refers to.
func sameNetns(nsfd int) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(nsfd, &a); err != nil {
		return false, err
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// close closes every extra socket and the namespace descriptor.
func (pc *portCache) close() {
	for i := range pc.ents {
		if f := pc.ents[i].f; f != nil {
			f.Close()
			pc.ents[i].f = nil
		}
	}
	if pc.netns >= 0 {
		unix.Close(pc.netns)
		pc.netns = -1
	}
}

// refit recomputes the ICRC of a transport packet for the main socket's
// port, which it leaves from because its own port could not be bound. The
// destination port is 4791, for which the engine computes every ICRC (and
// on which every RoCE receiver listens).
func (c *Conn) refit(p *packetio.Packet, dst netip.Addr) error {
	fc, err := wire.NewFlowICRC(wire.Flow{Src: c.local.Addr(), Dst: dst, SrcPort: c.local.Port()})
	if err != nil {
		return err
	}
	if p.Ext != nil {
		return fc.SetV(p.Buf[:p.ExtAt], p.Ext, p.Buf[p.ExtAt:])
	}
	return fc.Set(p.Buf)
}
