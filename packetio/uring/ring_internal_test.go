//go:build linux

package uring

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/internal/testenv"

	"golang.org/x/sys/unix"
)

func newTestRing(t *testing.T, sqEntries, cqEntries uint32, mode taskrunMode) *ring {
	t.Helper()
	r, err := newRing(sqEntries, cqEntries, mode)
	if errors.Is(err, ErrUnavailable) {
		testenv.Skip(t, testenv.Uring, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.close() })
	return r
}

// enterOK submits and waits, retrying interrupted calls.
func enterOK(t *testing.T, r *ring, wait uint32) int {
	t.Helper()
	for {
		n, errno := r.submit(wait, nil)
		switch errno {
		case 0:
			return n
		case unix.EINTR:
			continue
		default:
			t.Fatalf("io_uring_enter: %v", errno)
		}
	}
}

// The SQ fills to exactly its size (get returns nil after), the kernel
// takes a full batch in one enter, and the indices wrap around the rings
// many times with every completion arriving once, in order.
func TestSQFullAndWrapAround(t *testing.T) {
	for _, mode := range []taskrunMode{taskrunNormal, taskrunCoop} {
		r := newTestRing(t, 8, 16, mode)
		if r.sq.entries != 8 || r.cq.entries != 16 {
			t.Fatalf("entries SQ %d CQ %d, want 8 and 16", r.sq.entries, r.cq.entries)
		}
		next := uint32(0) // user data of the next NOP to queue
		seen := uint32(0) // and of the next completion expected
		for round := range 100 {
			n := 0
			for {
				s := r.sq.get()
				if s == nil {
					break
				}
				prepNop(s, userData(kindNop, 0, next))
				next++
				n++
			}
			if n != 8 || r.sq.space() != 0 {
				t.Fatalf("round %d: queued %d SQEs before the SQ was full (space %d), want 8", round, n, r.sq.space())
			}
			if got := enterOK(t, r, uint32(n)); got != n {
				t.Fatalf("round %d: the kernel took %d of %d SQEs", round, got, n)
			}
			if r.sq.space() != 8 {
				t.Fatalf("round %d: SQ space %d after submit, want 8", round, r.sq.space())
			}
			for range n {
				e, ok := r.cq.next()
				if !ok {
					t.Fatalf("round %d: completion %d missing", round, seen)
				}
				if udKind(e.userData) != kindNop || udIdx(e.userData) != seen || e.res != 0 {
					t.Fatalf("round %d: completion %+v, want NOP %d", round, e, seen)
				}
				seen++
			}
			if _, ok := r.cq.next(); ok {
				t.Fatalf("round %d: extra completion", round)
			}
			r.cq.release()
		}
		if head := *r.cq.khead; head != 800 || *r.sq.khead != 800 {
			t.Fatalf("heads SQ %d CQ %d after 800 NOPs", *r.sq.khead, head)
		}
	}
}

// More completions than the CQ holds, none reaped: the kernel keeps the
// excess in its overflow backlog and says so (IORING_SQ_CQ_OVERFLOW);
// needEnter then asks for an io_uring_enter, which moves the backlog into
// the CQ as space frees. Every completion arrives once, in order.
func TestCQOverflow(t *testing.T) {
	r := newTestRing(t, 8, 16, taskrunNormal)
	if r.features&featNoDrop == 0 {
		t.Skip("kernel without IORING_FEAT_NODROP drops overflowing completions")
	}
	const total = 6 * 8
	next := uint32(0)
	for range total / 8 {
		for range 8 {
			prepNop(r.sq.get(), userData(kindNop, 0, next))
			next++
		}
		enterOK(t, r, 0)
	}
	if r.sq.kflags()&sqCQOverflow == 0 || !r.needEnter() {
		t.Fatalf("SQ flags %#x after %d completions in a CQ of %d: no overflow flag", r.sq.kflags(), total, r.cq.entries)
	}
	seen := uint32(0)
	for tries := 0; seen < total && tries < 100; tries++ {
		for {
			e, ok := r.cq.next()
			if !ok {
				break
			}
			if udIdx(e.userData) != seen {
				t.Fatalf("completion %d, want %d", udIdx(e.userData), seen)
			}
			seen++
		}
		if r.needEnter() {
			enterOK(t, r, 0) // releases head, flushes the backlog
		} else {
			r.cq.release()
		}
	}
	if seen != total {
		t.Fatalf("reaped %d of %d completions", seen, total)
	}
	if r.sq.kflags()&sqCQOverflow != 0 || r.cq.overflowed() != 0 {
		t.Errorf("after draining: SQ flags %#x, dropped %d", r.sq.kflags(), r.cq.overflowed())
	}
}

// The buffer ring's tail lives in entry 0's resv field; publish stores it
// together with entry 0's bid, and the 16-bit tail wraps.
func TestBufRingPublishWraps(t *testing.T) {
	mem := make([]uint64, 2*8) // 8 entries of 16 bytes, 8-aligned
	r := &bufRing{bufs: unsafe.Slice((*ringBuf)(unsafe.Pointer(&mem[0])), 8), mask: 7}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), 16*8)
	r.tail, r.published = 0xFFFC, 0xFFFC
	bufs := make([]byte, 6*0x1000)
	for i := range 6 { // entries 4, 5, 6, 7, 0, 1
		r.add(unsafe.Pointer(&bufs[i*0x1000]), 100, uint16(40+i))
	}
	r.publish()
	if tail := binary.NativeEndian.Uint16(raw[14:]); tail != 2 || r.tail != 2 {
		t.Fatalf("published tail %d (local %d), want 2 after wrapping", tail, r.tail)
	}
	for i, e := range []int{4, 5, 6, 7, 0, 1} {
		b := r.bufs[e]
		if b.addr != uint64(uintptr(unsafe.Pointer(&bufs[i*0x1000]))) || b.len != 100 || b.bid != uint16(40+i) {
			t.Errorf("entry %d = %+v", e, b)
		}
	}
	if bid := binary.NativeEndian.Uint16(raw[12:]); bid != 44 {
		t.Errorf("entry 0's bid %d after publish, want 44", bid)
	}
	r.publish() // nothing new: no store
	if tail := binary.NativeEndian.Uint16(raw[14:]); tail != 2 {
		t.Fatalf("tail %d", tail)
	}
}

func TestUserData(t *testing.T) {
	for _, c := range []struct {
		kind uint8
		gen  uint32
		idx  uint32
	}{{kindSend, 0xFFFFFF, 1023}, {kindRecv, 0, 0xFFFFFFFF}, {kindWake, 1, 7}} {
		u := userData(c.kind, c.gen, c.idx)
		if udKind(u) != c.kind || udGen(u) != c.gen || udIdx(u) != c.idx {
			t.Errorf("userData(%d, %#x, %d) = %#x decodes to %d %#x %d", c.kind, c.gen, c.idx, u, udKind(u), udGen(u), udIdx(u))
		}
	}
	if udGen(userData(kindSend, 0x1000001, 0)) != 1 {
		t.Error("generation not truncated to 24 bits")
	}
}

// The setup flags fall back: the best set the kernel takes is in use, and a
// single-issuer ring starts disabled until its first submission.
func TestSetupFlags(t *testing.T) {
	r := newTestRing(t, 8, 16, taskrunDefer)
	t.Logf("setup flags %#x, features %#x", r.flags, r.features)
	if r.flags&setupDeferTaskrun != 0 {
		if r.enabled {
			t.Error("single-issuer ring enabled before its first submission")
		}
		prepNop(r.sq.get(), userData(kindNop, 0, 1))
		if n := enterOK(t, r, 1); n != 1 || !r.enabled {
			t.Fatalf("first submit = %d, enabled %v", n, r.enabled)
		}
		if e, ok := r.cq.next(); !ok || udIdx(e.userData) != 1 {
			t.Fatalf("completion %+v %v", e, ok)
		}
	}
	n := newTestRing(t, 8, 16, taskrunNormal)
	if n.flags&(setupCoopTaskrun|setupDeferTaskrun|setupSingleIssuer) != 0 || !n.enabled {
		t.Errorf("normal ring flags %#x", n.flags)
	}
}
