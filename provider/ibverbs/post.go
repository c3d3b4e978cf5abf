//go:build linux && cgo && ibverbs

package ibverbs

/*
#cgo noescape goroce_post_send
#cgo nocallback goroce_post_send
#cgo noescape goroce_post_recv
#cgo nocallback goroce_post_recv
#cgo noescape goroce_post_srq_recv
#cgo nocallback goroce_post_srq_recv
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// batch is the number of work requests or completions one cgo call handles.
const batch = 64

// maxBatchSGE is the number of scatter/gather elements one batch of work
// requests may hold.
const maxBatchSGE = 4 * batch

// scratch is C memory for one batch of work requests: the flat requests Go
// fills, the scatter/gather elements, and the libibverbs requests C links.
type scratch struct {
	mu   sync.Mutex
	g    unsafe.Pointer // batch x gsend or grecv
	sges *C.struct_ibv_sge
	wrs  unsafe.Pointer // batch x ibv_send_wr or ibv_recv_wr
}

func (s *scratch) alloc(gsize, wsize C.size_t) {
	s.g = C.calloc(batch, gsize)
	s.sges = (*C.struct_ibv_sge)(C.calloc(maxBatchSGE, C.size_t(unsafe.Sizeof(C.struct_ibv_sge{}))))
	s.wrs = C.calloc(batch, wsize)
}

func (s *scratch) free() {
	C.free(s.g)
	C.free(unsafe.Pointer(s.sges))
	C.free(s.wrs)
	s.g, s.sges, s.wrs = nil, nil, nil
}

// sgeBatch is the scatter/gather scratch of the batch being filled: the
// lists of its work requests, one after another.
type sgeBatch struct {
	sges []C.struct_ibv_sge // the scratch's maxBatchSGE elements
	n    int                // how many are placed
}

// sgeBatch returns the scratch's scatter/gather memory, empty.
func (s *scratch) sgeBatch() sgeBatch {
	return sgeBatch{sges: unsafe.Slice(s.sges, maxBatchSGE)}
}

// place copies a work request's scatter/gather list behind the lists
// already placed and returns the request's num_sge and sge_off. When the
// list does not fit in what is left, it places nothing and returns false:
// the request starts the next batch.
func (b *sgeBatch) place(l []verbs.SGE) (num, off C.uint32_t, ok bool) {
	if b.n+len(l) > len(b.sges) {
		return 0, 0, false
	}
	num, off = C.uint32_t(len(l)), C.uint32_t(b.n)
	for _, e := range l {
		b.sges[b.n] = C.struct_ibv_sge{addr: C.uint64_t(e.Addr), length: C.uint32_t(e.Length), lkey: C.uint32_t(e.LKey)}
		b.n++
	}
	return num, off, true
}

// checkSGL says what is wrong with a work request's scatter/gather list
// (more elements than a batch holds, so it would never fit), or nil.
func checkSGL(l []verbs.SGE) error {
	if len(l) > maxBatchSGE {
		return fmt.Errorf("ibverbs: %d SGEs, at most %d: %w", len(l), maxBatchSGE, verbs.ErrInvalidWR)
	}
	return nil
}

// checkSend says what is wrong with a send work request, or nil.
func (q *QP) checkSend(w *verbs.SendWR) error {
	if w.Opcode == verbs.WRAtomicWrite && q.aw {
		if len(w.SGList) != 1 || w.SGList[0].Length != 8 {
			return fmt.Errorf("ibverbs: ATOMIC_WRITE needs one 8-byte SGE: %w", verbs.ErrInvalidWR)
		}
		return nil
	}
	if w.Opcode > verbs.WRSendWithInv {
		if w.Opcode == verbs.WRFlush || w.Opcode == verbs.WRAtomicWrite || w.Opcode == verbs.WRRegMR {
			// FLUSH (rdma-core 44 has no ibv_wr_flush), ATOMIC_WRITE
			// (ibv_qp_ex, not wired), REG_MR (a kernel verb).
			return fmt.Errorf("ibverbs: opcode %v: %w", w.Opcode, verbs.ErrNotSupported)
		}
		return fmt.Errorf("ibverbs: opcode %d: %w", w.Opcode, verbs.ErrInvalidWR)
	}
	if err := checkSGL(w.SGList); err != nil {
		return err
	}
	if w.RKey == 0 && w.Opcode.NeedsRKey() {
		_, err := verbs.CheckSendWRs(unsafe.Slice(w, 1)) // remote memory without an rkey
		return err
	}
	if q.typ == verbs.QPTUD {
		ah, ok := w.AH.(*AH)
		if !ok || ah.ah == nil {
			return fmt.Errorf("ibverbs: UD send needs an address handle of this provider: %w", verbs.ErrInvalidWR)
		}
	}
	return nil
}

// PostSend posts wrs with one ibv_post_send per 64 work requests. It
// returns how many were posted; when fewer than len(wrs), wrs[n] is the bad
// one and the error says why. It does not allocate (except for the error).
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	s := &q.send
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.qp == nil {
		return 0, fmt.Errorf("ibverbs: post_send: %w", verbs.ErrDestroyed)
	}
	gs := unsafe.Slice((*C.struct_gsend)(s.g), batch)
	posted := 0
	for posted < len(wrs) {
		n, sg := 0, s.sgeBatch()
		var bad error
		for posted+n < len(wrs) && n < batch {
			w := &wrs[posted+n]
			if bad = q.checkSend(w); bad != nil {
				break
			}
			if w.Opcode == verbs.WRAtomicWrite {
				break // posted alone, below, with ibv_wr_atomic_write
			}
			num, off, ok := sg.place(w.SGList)
			if !ok {
				break
			}
			g := &gs[n]
			g.wr_id = C.uint64_t(w.WRID)
			g.remote_addr = C.uint64_t(w.RemoteAddr)
			g.compare_add = C.uint64_t(w.CompareAdd)
			g.swap = C.uint64_t(w.Swap)
			g.ah = nil
			if ah, ok := w.AH.(*AH); ok {
				g.ah = ah.ah
			}
			g.opcode = C.uint32_t(w.Opcode)
			g.flags = C.uint32_t(w.Flags)
			g.imm = C.uint32_t(w.Imm)
			g.rkey = C.uint32_t(w.RKey)
			g.remote_qpn = C.uint32_t(w.RemoteQPN)
			g.remote_qkey = C.uint32_t(w.RemoteQKey)
			g.inv_rkey = C.uint32_t(w.InvalidateRKey)
			g.num_sge, g.sge_off = num, off
			g.mw, g.mr = nil, nil
			if w.Opcode == verbs.WRBindMW {
				if bad = bindOf(g, w.Bind); bad != nil {
					break
				}
			}
			n++
		}
		if n > 0 {
			var b C.int
			if rc := C.goroce_post_send(q.qp, &gs[0], C.int(n), s.sges, (*C.struct_ibv_send_wr)(s.wrs), &b); rc != 0 {
				return posted + int(b), verbErr("ibv_post_send", int(rc), fmt.Sprintf("QP %#x, WR %d (%v)", q.num, posted+int(b), wrs[posted+int(b)].Opcode))
			}
			posted += n
		}
		if bad != nil {
			return posted, bad
		}
		if posted < len(wrs) && wrs[posted].Opcode == verbs.WRAtomicWrite {
			w := &wrs[posted]
			if rc := C.goroce_atomic_write(q.qp, C.uint64_t(w.WRID), C.uint32_t(w.Flags), C.uint32_t(w.RKey), C.uint64_t(w.RemoteAddr), C.uint64_t(w.SGList[0].Addr)); rc != 0 {
				return posted, verbErr("ibv_wr_atomic_write", int(rc), fmt.Sprintf("QP %#x, WR %d", q.num, posted))
			}
			posted++
		}
	}
	return posted, nil
}

// PostRecv posts receive work requests with one ibv_post_recv per 64, with
// PostSend's contract.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	if q.qp == nil {
		return 0, fmt.Errorf("ibverbs: post_recv: %w", verbs.ErrDestroyed)
	}
	return postRecv(&q.recv, wrs, q.qp, nil)
}

// postRecv posts to qp's receive queue, or to srq, with s.mu held. (No
// callback: a function value would make the out-parameter escape to the
// heap.)
func postRecv(s *scratch, wrs []verbs.RecvWR, qp *C.struct_ibv_qp, srq *C.struct_ibv_srq) (int, error) {
	verb := "ibv_post_recv"
	if srq != nil {
		verb = "ibv_post_srq_recv"
	}
	gs := unsafe.Slice((*C.struct_grecv)(s.g), batch)
	posted := 0
	for posted < len(wrs) {
		n, sg := 0, s.sgeBatch()
		var bad error
		for posted+n < len(wrs) && n < batch {
			w := &wrs[posted+n]
			if bad = checkSGL(w.SGList); bad != nil {
				break
			}
			num, off, ok := sg.place(w.SGList)
			if !ok {
				break
			}
			g := &gs[n]
			g.wr_id = C.uint64_t(w.WRID)
			g.num_sge, g.sge_off = num, off
			n++
		}
		if n > 0 {
			var b C.int
			var rc C.int
			if srq != nil {
				rc = C.goroce_post_srq_recv(srq, &gs[0], C.int(n), s.sges, (*C.struct_ibv_recv_wr)(s.wrs), &b)
			} else {
				rc = C.goroce_post_recv(qp, &gs[0], C.int(n), s.sges, (*C.struct_ibv_recv_wr)(s.wrs), &b)
			}
			if rc != 0 {
				return posted + int(b), verbErr(verb, int(rc), fmt.Sprintf("WR %d", posted+int(b)))
			}
			posted += n
		}
		if bad != nil {
			return posted, bad
		}
	}
	return posted, nil
}
