package uring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/packetio"
)

// ringBuf is struct io_uring_buf: one entry of a provided-buffer ring.
type ringBuf struct {
	addr uint64
	len  uint32
	bid  uint16
	resv uint16
}

// bufRing is a provided-buffer ring (IORING_REGISTER_PBUF_RING, Linux
// 5.19): this side adds buffers at tail and publishes tail with a release
// store; the kernel takes one buffer per received datagram from head. The
// 16-bit tail overlays the resv field of entry 0 (struct io_uring_buf_ring).
type bufRing struct {
	mem       []byte // anonymous mapping holding the entries
	bufs      []ringBuf
	mask      uint16
	tail      uint16
	published uint16
	bgid      uint16
}

// newBufRing maps a ring of entries (a power of two, at most 32768) and
// registers it with the io_uring as buffer group bgid.
func newBufRing(ringFd int, entries int, bgid uint16) (*bufRing, error) {
	size := (entries*int(unsafe.Sizeof(ringBuf{})) + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("packetio/uring: mmap buffer ring: %w", err)
	}
	reg := bufReg{ringAddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), ringEntries: uint32(entries), bgid: bgid}
	if e := register(ringFd, registerPbufRing, unsafe.Pointer(&reg), 1); e != 0 {
		unix.Munmap(mem)
		if e == unix.EINVAL {
			return nil, fmt.Errorf("packetio/uring: register buffer ring: %w: %w", packetio.ErrNotSupported, e)
		}
		return nil, fmt.Errorf("packetio/uring: register buffer ring: %w", e)
	}
	return &bufRing{
		mem:  mem,
		bufs: unsafe.Slice((*ringBuf)(unsafe.Pointer(&mem[0])), entries),
		mask: uint16(entries - 1),
		bgid: bgid,
	}, nil
}

// add queues a buffer for the kernel; publish makes the queued ones visible.
func (r *bufRing) add(addr unsafe.Pointer, n uint32, bid uint16) {
	b := &r.bufs[r.tail&r.mask]
	b.addr = uint64(uintptr(addr))
	b.len = n
	b.bid = bid // for entry 0, publish's word store carries it with tail
	r.tail++
}

// publish stores tail with release semantics. Go has no 16-bit atomic
// store, so it stores the 32-bit word made of entry 0's bid and tail (only
// this side writes either).
func (r *bufRing) publish() {
	if r.tail == r.published {
		return
	}
	w := (*uint32)(unsafe.Pointer(&r.bufs[0].bid))
	var b [4]byte
	binary.NativeEndian.PutUint16(b[0:], r.bufs[0].bid)
	binary.NativeEndian.PutUint16(b[2:], r.tail)
	atomic.StoreUint32(w, binary.NativeEndian.Uint32(b[:]))
	r.published = r.tail
}

// free unmaps the ring; the io_uring must be closed (or the ring
// unregistered) first.
func (r *bufRing) free() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.bufs = nil, nil
	}
}
