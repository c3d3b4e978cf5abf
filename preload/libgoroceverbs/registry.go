//go:build linux && cgo && ibverbs

package main

// #include <stdlib.h>
import "C"

import (
	"net"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The registry: every structure handed to the program, by its address, so
// that a pointer the library did not make (or made and freed) is refused with
// EINVAL instead of being followed.
var reg = struct {
	sync.RWMutex
	m map[uintptr]any
}{m: map[uintptr]any{}}

func put(p unsafe.Pointer, o any) {
	reg.Lock()
	reg.m[uintptr(p)] = o
	reg.Unlock()
}

func del(p unsafe.Pointer) {
	reg.Lock()
	delete(reg.m, uintptr(p))
	reg.Unlock()
}

// get returns the object of p if it is a live *T.
func get[T any](p unsafe.Pointer) *T {
	if p == nil {
		return nil
	}
	reg.RLock()
	o := reg.m[uintptr(p)]
	reg.RUnlock()
	t, _ := o.(*T)
	return t
}

// dropContext removes from the registry every object of g, which the close
// of its context destroys.
func dropContext(g *gctx) {
	reg.Lock()
	defer reg.Unlock()
	for k, o := range reg.m {
		if c, ok := o.(interface{ owner() *gctx }); ok && c.owner() == g {
			delete(reg.m, k)
		}
	}
}

// eventQueue hands events from goroutines to the program's thread: a queue
// and an eventfd (semaphore mode) that counts its entries, which the program
// may poll.
type eventQueue[T any] struct {
	fd     int
	mu     sync.Mutex
	q      []T
	closed bool
}

func newEventQueue[T any]() (*eventQueue[T], error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return nil, err
	}
	return &eventQueue[T]{fd: fd}, nil
}

func (e *eventQueue[T]) push(v T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.q = append(e.q, v)
	var one [8]byte
	*(*uint64)(unsafe.Pointer(&one)) = 1
	unix.Write(e.fd, one[:])
}

// pop takes the oldest event; the caller has read its count from fd.
func (e *eventQueue[T]) pop() (T, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var v T
	if len(e.q) == 0 {
		return v, false
	}
	v = e.q[0]
	e.q = e.q[1:]
	return v, true
}

func (e *eventQueue[T]) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		unix.Close(e.fd)
	}
}

// ifindexOf is the index of the interface that holds addr, or 0.
func ifindexOf(addr string) int {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return 0
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		as, _ := i.Addrs()
		for _, x := range as {
			if n, ok := x.(*net.IPNet); ok {
				if p, ok := netip.AddrFromSlice(n.IP); ok && p.Unmap() == a.Unmap() {
					return i.Index
				}
			}
		}
	}
	return 0
}

// Destroyed structures wait in quarantine before they are freed: the inline
// functions of verbs.h read qp->context->ops (and cq's, srq's) before the
// library sees the call, so a call through a recently destroyed object
// reaches it and is refused with EINVAL instead of reading freed memory.
const quarantineLen = 4096

var quarantine struct {
	sync.Mutex
	ring [quarantineLen]unsafe.Pointer
	next int
}

func retire(p unsafe.Pointer) {
	quarantine.Lock()
	old := quarantine.ring[quarantine.next]
	quarantine.ring[quarantine.next] = p
	quarantine.next = (quarantine.next + 1) % quarantineLen
	quarantine.Unlock()
	if old != nil {
		C.free(old)
	}
}
