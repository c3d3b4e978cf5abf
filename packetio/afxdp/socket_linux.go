//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// socket is one AF_XDP socket bound to one RX queue of the interface, with
// its own UMEM and its four rings, each mapped from the socket.
//
// UMEM frames [0, rxFrames) receive: they live in the fill ring, the
// kernel, the RX ring or Conn's held list. Frames [rxFrames, frames)
// transmit: they live in the free list, the lent list, the TX ring, the
// kernel or the completion ring.
type socket struct {
	fd       int
	queue    int
	umem     []byte
	maps     [][]byte
	fill     producer[uint64]
	comp     consumer[uint64]
	rx       consumer[unix.XDPDesc]
	tx       producer[unix.XDPDesc]
	zerocopy bool
}

// geometry is the UMEM and ring layout.
type geometry struct {
	frames, rxFrames, frameSize, headroom int
	populate, lock                        bool
}

func (g geometry) txFrames() int { return g.frames - g.rxFrames }

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// nextPow2 returns the least power of two not below n (n > 0).
func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// openSocket creates a socket, its UMEM and rings, and binds it to queue of
// ifindex with bind flags (XDP_ZEROCOPY or XDP_COPY, with XDP_USE_SG for
// multi-buffer; XDP_USE_NEED_WAKEUP is added). The fill ring is filled with every receive frame.
func openSocket(ifindex, queue int, g geometry, bindFlags uint16) (_ *socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, sysErr("socket(AF_XDP)", err)
	}
	s := &socket{fd: fd, queue: queue}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err = s.registerUMEM(g); err != nil {
		return nil, err
	}
	if err = s.mapRings(g); err != nil {
		return nil, err
	}
	// Every receive frame goes to the fill ring before binding, so that
	// the kernel has frames from the first packet on.
	start, got := s.fill.Reserve(uint32(g.rxFrames))
	for i := range got {
		s.fill.Set(start+i, uint64(int(i)*g.frameSize))
	}
	s.fill.Submit()

	sa := &unix.SockaddrXDP{Flags: bindFlags | unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if err = unix.Bind(fd, sa); err != nil {
		return nil, sysErr(fmt.Sprintf("bind queue %d (%s)", queue, bindName(bindFlags)), err)
	}
	opts, err := getOptions(fd)
	if err != nil {
		return nil, sysErr("getsockopt XDP_OPTIONS", err)
	}
	s.zerocopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	return s, nil
}

// registerUMEM maps the socket's UMEM, g.frames frames of g.frameSize
// bytes (populated and locked as g asks), and registers it with the
// socket.
func (s *socket) registerUMEM(g geometry) (err error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if g.populate {
		flags |= unix.MAP_POPULATE
	}
	if s.umem, err = unix.Mmap(-1, 0, g.frames*g.frameSize, unix.PROT_READ|unix.PROT_WRITE, flags); err != nil {
		return sysErr("mmap UMEM", err)
	}
	if g.lock {
		if err = unix.Mlock(s.umem); err != nil {
			return sysErr("mlock UMEM", err)
		}
	}
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&s.umem[0]))),
		Len:      uint64(len(s.umem)),
		Size:     uint32(g.frameSize),
		Headroom: uint32(g.headroom),
	}
	if err = setUmemReg(s.fd, &reg); err != nil {
		return sysErr("setsockopt XDP_UMEM_REG", err)
	}
	return nil
}

// mapRings sizes the socket's four rings (fill, completion, RX, TX) for
// geometry g and maps them. Each ring has room for every frame that may be
// in it; ring sizes are powers of two.
func (s *socket) mapRings(g geometry) error {
	rxN, txN := nextPow2(g.rxFrames), nextPow2(g.txFrames())
	for _, r := range []struct {
		name string
		opt  int
		n    int
	}{
		{"XDP_UMEM_FILL_RING", unix.XDP_UMEM_FILL_RING, rxN},
		{"XDP_UMEM_COMPLETION_RING", unix.XDP_UMEM_COMPLETION_RING, txN},
		{"XDP_RX_RING", unix.XDP_RX_RING, rxN},
		{"XDP_TX_RING", unix.XDP_TX_RING, txN},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			return sysErr("setsockopt "+r.name, err)
		}
	}
	off, err := getMmapOffsets(s.fd)
	if err != nil {
		return sysErr("getsockopt XDP_MMAP_OFFSETS", err)
	}
	mmap := func(name string, pgoff int64, ro unix.XDPRingOffset, n int, descSize uintptr) ([]byte, error) {
		m, err := unix.Mmap(s.fd, pgoff, ringMapLen(ro, uint32(n), descSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, sysErr("mmap "+name, err)
		}
		s.maps = append(s.maps, m)
		return m, nil
	}
	var m []byte
	if m, err = mmap("fill ring", unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, rxN, sizeofAddr); err != nil {
		return err
	}
	s.fill = newProducer[uint64](m, off.Fr, uint32(rxN))
	if m, err = mmap("completion ring", unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, txN, sizeofAddr); err != nil {
		return err
	}
	s.comp = newConsumer[uint64](m, off.Cr, uint32(txN))
	if m, err = mmap("RX ring", unix.XDP_PGOFF_RX_RING, off.Rx, rxN, sizeofDesc); err != nil {
		return err
	}
	s.rx = newConsumer[unix.XDPDesc](m, off.Rx, uint32(rxN))
	if m, err = mmap("TX ring", unix.XDP_PGOFF_TX_RING, off.Tx, txN, sizeofDesc); err != nil {
		return err
	}
	s.tx = newProducer[unix.XDPDesc](m, off.Tx, uint32(txN))
	return nil
}

func bindName(flags uint16) string {
	n := "copy"
	if flags&unix.XDP_ZEROCOPY != 0 {
		n = "zero-copy"
	}
	if flags&^(unix.XDP_ZEROCOPY|unix.XDP_COPY) != 0 {
		n += ", multi-buffer (XDP_USE_SG)"
	}
	return n
}

// stats returns the kernel's counters of the socket.
func (s *socket) stats() (unix.XDPStatistics, error) { return getStatistics(s.fd) }

func (s *socket) close() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	for _, m := range s.maps {
		unix.Munmap(m)
	}
	s.maps = nil
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
}

// sysErr wraps a system call error, matching packetio.ErrNotSupported (and
// ErrPermission for EPERM/EACCES) when the kernel, driver or privileges say
// no.
func sysErr(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("packetio/afxdp: %s: %w: %w: %w", what, ErrPermission, errNotSupported, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EPROTONOSUPPORT),
		errors.Is(err, unix.ENOPROTOOPT), errors.Is(err, unix.EINVAL) && what == "socket(AF_XDP)":
		return fmt.Errorf("packetio/afxdp: %s: %w: %w", what, errNotSupported, err)
	}
	return fmt.Errorf("packetio/afxdp: %s: %w", what, err)
}
