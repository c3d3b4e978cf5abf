//go:build linux

package afxdp

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeRing is ring memory laid out as the kernel lays out a mapped ring,
// with the test playing the kernel's side through the same indices.
type fakeRing struct {
	mem []byte
	off unix.XDPRingOffset
}

func newFakeRing(size uint32, descSize uintptr, prod, cons uint32) *fakeRing {
	off := unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 192}
	// Backed by uint64s so that the descriptors are 8-byte aligned.
	words := make([]uint64, (int(off.Desc)+int(size)*int(descSize)+7)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	r := &fakeRing{mem: mem, off: off}
	r.idx(off.Producer).Store(prod)
	r.idx(off.Consumer).Store(cons)
	return r
}

func (r *fakeRing) idx(off uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}
func (r *fakeRing) prod() uint32            { return r.idx(r.off.Producer).Load() }
func (r *fakeRing) cons() uint32            { return r.idx(r.off.Consumer).Load() }
func (r *fakeRing) setProd(v uint32)        { r.idx(r.off.Producer).Store(v) }
func (r *fakeRing) setCons(v uint32)        { r.idx(r.off.Consumer).Store(v) }
func (r *fakeRing) setFlags(v uint32)       { r.idx(r.off.Flags).Store(v) }
func (r *fakeRing) addrs(n uint32) []uint64 { return descs[uint64](r.mem, r.off, n) }

func TestProducerFullEmptyWrap(t *testing.T) {
	for _, start := range []uint32{0, 5, 0xFFFFFFFA} { // the last wraps the 32-bit indices
		const size = 8
		k := newFakeRing(size, 8, start, start)
		q := newProducer[uint64](k.mem, k.off, size)
		s, got := q.Reserve(size + 3)
		if got != size || s != start {
			t.Fatalf("start %#x: Reserve(11) on an empty ring of 8 = %#x, %d", start, s, got)
		}
		for i := range got {
			q.Set(s+i, uint64(100+i))
		}
		if _, got := q.Reserve(1); got != 0 {
			t.Fatalf("Reserve on a full ring got %d", got)
		}
		if k.prod() != start {
			t.Fatalf("producer index published before Submit: %#x", k.prod())
		}
		q.Submit()
		if k.prod() != start+size {
			t.Fatalf("after Submit producer %#x, want %#x", k.prod(), start+size)
		}
		// The kernel consumes 3: they can be reserved again, in the slots
		// the index masks to.
		slots := k.addrs(size)
		for i := range uint32(3) {
			if v := slots[(start+i)&(size-1)]; v != uint64(100+i) {
				t.Fatalf("slot of entry %d holds %d", i, v)
			}
		}
		k.setCons(start + 3)
		s, got = q.Reserve(5)
		if got != 3 || s != start+size {
			t.Fatalf("after the kernel consumed 3: Reserve(5) = %#x, %d", s, got)
		}
		q.Set(s, 7)
		q.Cancel(2)
		q.Submit()
		if k.prod() != start+size+1 || slots[(start+size)&(size-1)] != 7 {
			t.Fatalf("Cancel: producer %#x", k.prod())
		}
		if o := q.Outstanding(); o != 6 {
			t.Fatalf("Outstanding = %d, want 6", o)
		}
	}
}

func TestConsumerFullEmptyWrapAndCache(t *testing.T) {
	for _, start := range []uint32{0, 0xFFFFFFFE} {
		const size = 4
		k := newFakeRing(size, unsafe.Sizeof(unix.XDPDesc{}), start, start)
		q := newConsumer[unix.XDPDesc](k.mem, k.off, size)
		if _, got := q.Peek(4); got != 0 {
			t.Fatalf("Peek on an empty ring got %d", got)
		}
		d := descs[unix.XDPDesc](k.mem, k.off, size)
		produce := func(n uint32) {
			p := k.prod()
			for i := range n {
				d[(p+i)&(size-1)] = unix.XDPDesc{Addr: uint64(p + i), Len: 64}
			}
			k.setProd(p + n)
		}
		produce(size) // full
		s, got := q.Peek(2)
		if got != 2 || s != start || q.Get(s).Addr != uint64(start) || q.Get(s+1).Addr != uint64(start+1) {
			t.Fatalf("Peek(2) of a full ring = %#x, %d", s, got)
		}
		q.Release(got)
		if k.cons() != start+2 {
			t.Fatalf("consumer %#x after Release(2)", k.cons())
		}
		// The kernel produces 2 more (wrapping the slots). A Peek the cache
		// can answer does not look: it sees 2; a larger one reloads.
		produce(2)
		if _, got := q.Peek(2); got != 2 {
			t.Fatalf("Peek(2) = %d", got)
		}
		s, got = q.Peek(10)
		if got != 4 {
			t.Fatalf("Peek(10) = %d, want 4 (reloaded)", got)
		}
		for i := range got {
			if a := q.Get(s + i).Addr; a != uint64(start+2+i) {
				t.Fatalf("entry %d addr %#x, want %#x", i, a, start+2+i)
			}
		}
		q.Release(got)
		if _, got := q.Peek(1); got != 0 || k.cons() != start+size+2 {
			t.Fatalf("after draining: Peek %d, consumer %#x", got, k.cons())
		}
	}
}

func TestNeedWakeup(t *testing.T) {
	k := newFakeRing(8, 8, 0, 0)
	q := newProducer[uint64](k.mem, k.off, 8)
	if q.needWakeup() {
		t.Fatal("needWakeup with flags 0")
	}
	k.setFlags(unix.XDP_RING_NEED_WAKEUP)
	if !q.needWakeup() {
		t.Fatal("needWakeup false with XDP_RING_NEED_WAKEUP set")
	}
	k.setFlags(0)
	if q.needWakeup() {
		t.Fatal("needWakeup stays set")
	}
}

// A producer and a consumer over the same memory, on two goroutines, as
// user space and the kernel are: every entry arrives once, in order, with
// the value written before the batch was published (run with -race).
func TestRingConcurrent(t *testing.T) {
	const size, total = 64, 200000
	k := newFakeRing(size, 8, 0xFFFFF000, 0xFFFFF000)
	p := newProducer[uint64](k.mem, k.off, size)
	c := newConsumer[uint64](k.mem, k.off, size)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sent := uint64(0); sent < total; {
			s, got := p.Reserve(uint32(min(17, total-sent)))
			for i := range got {
				p.Set(s+i, sent+uint64(i))
			}
			p.Submit()
			sent += uint64(got)
			if got == 0 {
				yield()
			}
		}
	}()
	for next := uint64(0); next < total; {
		s, got := c.Peek(23)
		for i := range got {
			if v := c.Get(s + i); v != next {
				t.Fatalf("got %d, want %d", v, next)
			}
			next++
		}
		c.Release(got)
		if got == 0 {
			yield()
		}
	}
	wg.Wait()
}
