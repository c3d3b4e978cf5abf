package pollwait

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Epoll is an epoll instance of a packet path's own, itself in Go's
// netpoller, that a socket kept out of the netpoller joins only while a
// goroutine waits for it (Join, then Waiter.Wait or RawConn.Read on File),
// and leaves when nobody waits (Leave, Polled).
//
// Why not the netpoller itself: every datagram queued to a socket that an
// epoll instance watches runs epoll's wake-up callback, in the sender's
// context (for a veth or loopback peer, the softirq of the peer's send),
// whether anybody waits or not: 0.27 µs a datagram between two namespaces
// here, half a microsecond of a 64-byte ping-pong's round trip. A socket
// in Go's netpoller stays registered for as long as it is open. A socket
// that a busy driver polls (recvmmsg until EAGAIN) needs no wake-up, and a
// socket that is in no epoll instance costs its senders nothing for one.
//
// The socket joins level-triggered: a wait that begins while datagrams are
// queued ends at once. Joining and leaving are an epoll_ctl each, made
// through the RawConns of the socket and of the instance (each holds its
// file open meanwhile), and allocate nothing.
type Epoll struct {
	f      *os.File        // the epoll instance, non-blocking, in the netpoller
	raw    syscall.RawConn // f's
	events uint32          // what the socket joins for (EPOLLIN, EPOLLOUT)
	joined syscall.RawConn // the socket in the instance, nil if none
	polls  int             // Polled calls since the last Join (each wait joins)
	got    int             // datagrams those polls returned

	// ctl's state and its two callbacks, bound once.
	op, fd   int
	ctlErr   error
	sockFn   func(fd uintptr)
	epFn     func(fd uintptr)
	ctlEvent unix.EpollEvent
}

// IdlePolls is how many polls without a wait (Polled) take a socket out of
// its Epoll: a driver that polls for a while after every burst, and waits
// between bursts, then joins and leaves once a burst, not once a poll.
const IdlePolls = 64

// IdleDatagrams is how many datagrams taken by polls without a wait take a
// socket out of its Epoll sooner: each one queued while the socket is in
// it cost its sender a wake-up that nobody needed (0.27 µs between two
// namespaces here), while a leave and a later join cost two epoll_ctl
// (about 1 µs together). A stream that the driver polls after a wait then
// pays for 8 such wake-ups, not for IdlePolls polls' worth of them (a
// 64 KiB WRITE stream between two namespaces: the wake-ups' share of the
// machine's processor time, sampled with perf, fell from 2.0% to 1.1%),
// while a ping-pong that waits for every message, a datagram or two a
// wait, stays in.
const IdleDatagrams = 8

// NewEpoll creates an epoll instance for sockets that join it for events
// (unix.EPOLLIN or unix.EPOLLOUT). name names its file in errors.
func NewEpoll(name string, events uint32) (*Epoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: epoll_create1: %w", name, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: epoll: %w", name, err)
	}
	// Non-blocking: os.NewFile puts it in the netpoller, which reports it
	// readable when a socket in it has one of events.
	f := os.NewFile(uintptr(fd), name+":epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: epoll: %w", name, err)
	}
	e := &Epoll{f: f, raw: raw, events: events}
	e.sockFn, e.epFn = e.ctlSock, e.ctlEp
	return e, nil
}

// File returns the instance's file, for a Waiter (Init) or RawConn.Read:
// it is readable while a socket in it has the events it joined for.
func (e *Epoll) File() *os.File { return e.f }

// Raw returns File's RawConn.
func (e *Epoll) Raw() syscall.RawConn { return e.raw }

// Join puts sock (the RawConn of a socket outside the netpoller) in the
// instance, taking out the socket there before if it is another one.
func (e *Epoll) Join(sock syscall.RawConn) error {
	e.polls, e.got = 0, 0
	if e.joined == sock {
		return nil
	}
	if err := e.Leave(); err != nil {
		return err
	}
	if err := e.ctl(unix.EPOLL_CTL_ADD, sock); err != nil {
		return err
	}
	e.joined = sock
	return nil
}

// Leave takes the socket out of the instance, if one is in it.
func (e *Epoll) Leave() error {
	if e.joined == nil {
		return nil
	}
	sock := e.joined
	e.joined = nil
	return e.ctl(unix.EPOLL_CTL_DEL, sock)
}

// Polled counts a poll of the socket that did not wait and the n datagrams
// it returned; after IdlePolls such polls in a row, or IdleDatagrams
// datagrams taken by them, the socket leaves the instance.
func (e *Epoll) Polled(n int) {
	if e.joined == nil {
		return
	}
	e.polls++
	e.got += n
	if e.polls >= IdlePolls || e.got >= IdleDatagrams {
		e.Leave() // an error is the socket's or instance's closing
	}
}

// Close closes the instance: a goroutine waiting on File returns with the
// file's closing error.
func (e *Epoll) Close() error { return e.f.Close() }

// ctl makes one epoll_ctl of op for sock's descriptor, with both files held
// open by their RawConns.
func (e *Epoll) ctl(op int, sock syscall.RawConn) error {
	e.op, e.ctlErr = op, nil
	if err := sock.Control(e.sockFn); err != nil {
		return err
	}
	return e.ctlErr
}

func (e *Epoll) ctlSock(fd uintptr) {
	e.fd = int(fd)
	if err := e.raw.Control(e.epFn); err != nil {
		e.ctlErr = err
	}
}

func (e *Epoll) ctlEp(ep uintptr) {
	e.ctlEvent = unix.EpollEvent{Events: e.events, Fd: int32(e.fd)}
	if err := unix.EpollCtl(int(ep), e.op, e.fd, &e.ctlEvent); err != nil {
		e.ctlErr = fmt.Errorf("epoll_ctl: %w", err)
	}
}
