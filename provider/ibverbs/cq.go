//go:build linux && cgo && ibverbs

package ibverbs

/*
#cgo noescape goroce_poll
#cgo nocallback goroce_poll
#cgo noescape goroce_poll_ex
#cgo nocallback goroce_poll_ex
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// CQ is a completion queue (struct ibv_cq, or struct ibv_cq_ex when made by
// CreateCQEx).
type CQ struct {
	ctx     *Context
	ch      *CompChannel
	cq      *C.struct_ibv_cq
	ex      *C.struct_ibv_cq_ex
	flags   C.uint64_t
	mu      sync.Mutex // serialises polls (the scratch memory) and guards cq
	scratch *C.struct_ibv_wc
	out     *C.struct_gwc
	failed  atomic.Bool // polling failed or IBV_EVENT_CQ_ERR came: see Err
}

// CreateCQ creates a completion queue of at least cqe entries
// (ibv_create_cq), reporting events to ch when armed. On a device that
// stamps completions (QueryDevice's CompletionTimestamps is
// TimestampHardware) it is an extended CQ (ibv_create_cq_ex) with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, and Poll fills
// WC.Timestamp with the device's wall-clock nanoseconds, which
// verbs.Now's clock (Unix time carried by the monotonic clock) follows to
// within the wall clock's drift since the process started.
func (c *Context) CreateCQ(cqe int, ch verbs.CompChannel) (verbs.CQ, error) {
	var ex *CQExOptions
	if c.wallclock {
		ex = &CQExOptions{Wallclock: true}
	}
	q, err := c.createCQ(cqe, ch, ex)
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (c *Context) createCQ(cqe int, ch verbs.CompChannel, ex *CQExOptions) (*CQ, error) {
	if cqe <= 0 || cqe > 1<<24 {
		return nil, fmt.Errorf("ibverbs: %d CQ entries: %w", cqe, verbs.ErrInvalidAttr)
	}
	var cch *CompChannel
	var cp *C.struct_ibv_comp_channel
	if ch != nil {
		var ok bool
		if cch, ok = ch.(*CompChannel); !ok || cch.ctx == nil {
			return nil, fmt.Errorf("ibverbs: completion channel of another provider: %w", verbs.ErrInvalidAttr)
		}
		cch.life.RLock() // the channel lives until the CQ holds it
		defer cch.life.RUnlock()
		if cp = cch.ch; cp == nil {
			return nil, fmt.Errorf("ibverbs: completion channel: %w", verbs.ErrDestroyed)
		}
	}
	cc, err := c.enter()
	if err != nil {
		return nil, err
	}
	defer c.leave()
	q := &CQ{ctx: c, ch: cch}
	if ex == nil {
		var errno error
		q.cq, errno = C.ibv_create_cq(cc, C.int(cqe), nil, cp, 0)
		if q.cq == nil {
			return nil, verbErr("ibv_create_cq", callErrno(errno), "")
		}
	} else {
		q.flags = cqExFlags
		if ex.Timestamp {
			q.flags |= C.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
		}
		if ex.Wallclock {
			q.flags |= C.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
		}
		var e C.int
		q.ex = C.goroce_create_cq_ex(cc, C.int(cqe), cp, q.flags, &e)
		if q.ex == nil {
			return nil, verbErr("ibv_create_cq_ex", int(e), fmt.Sprintf("wc_flags %#x", uint64(q.flags)))
		}
		q.cq = C.goroce_cq_ex_to_cq(q.ex)
	}
	q.scratch = (*C.struct_ibv_wc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	q.out = (*C.struct_gwc)(C.calloc(batch, C.size_t(unsafe.Sizeof(C.struct_gwc{}))))
	if !c.track(q) {
		C.ibv_destroy_cq(q.cq)
		C.free(unsafe.Pointer(q.scratch))
		C.free(unsafe.Pointer(q.out))
		return nil, c.errClosed()
	}
	c.mu.Lock()
	c.cqs[q.cq] = q
	c.mu.Unlock()
	if cch != nil {
		cch.mu.Lock()
		cch.cqs[q.cq] = q
		cch.mu.Unlock()
	}
	return q, nil
}

// Poll moves up to len(wc) completions into wc (ibv_poll_cq, or
// ibv_start_poll and ibv_next_poll on an extended CQ; one cgo call per 64)
// and returns how many. It does not allocate. A polling error (the CQ is in
// error) reads as no completions. WC.Timestamp is the completion's
// wall-clock time when the CQ carries it (see CreateCQ), else 0.
func (q *CQ) Poll(wc []verbs.WC) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil {
		return 0
	}
	total := 0
	for total < len(wc) {
		n := min(len(wc)-total, batch)
		k := q.poll(n)
		if k <= 0 {
			if k < 0 {
				q.failed.Store(true)
			}
			break
		}
		out := unsafe.Slice(q.out, k)
		for i := range out {
			toWC(&out[i], &wc[total+i])
		}
		total += k
		if k < n {
			break
		}
	}
	return total
}

// hold locks the CQ and returns it, or nil (unlocked) when destroyed.
func (q *CQ) hold() *C.struct_ibv_cq {
	q.mu.Lock()
	if q.cq == nil {
		q.mu.Unlock()
		return nil
	}
	return q.cq
}

func (q *CQ) release() { q.mu.Unlock() }

func (q *CQ) poll(n int) int {
	if q.ex != nil {
		return int(C.goroce_poll_ex(q.ex, C.int(n), q.flags, q.out))
	}
	return int(C.goroce_poll(q.cq, C.int(n), q.scratch, q.out))
}

func toWC(o *C.struct_gwc, w *verbs.WC) {
	*w = verbs.WC{WRID: uint64(o.wr_id), Status: verbs.WCStatus(o.status), Opcode: verbs.WCOpcode(o.opcode),
		VendorErr: uint32(o.vendor_err), ByteLen: uint32(o.byte_len), QPNum: uint32(o.qp_num), SrcQP: uint32(o.src_qp),
		Flags: verbs.WCFlags(o.wc_flags), PKeyIndex: uint16(o.pkey_index), SLID: uint16(o.slid), SL: uint8(o.sl),
		DLIDPathBits: uint8(o.dlid_path_bits), Timestamp: int64(o.wallclock)}
	if w.Flags&verbs.WCFlagWithInv != 0 {
		w.InvalidatedRKey = uint32(o.imm)
	} else if w.Flags&verbs.WCFlagWithImm != 0 {
		w.Imm = uint32(o.imm)
	}
}

// ReqNotify arms the CQ (ibv_req_notify_cq).
func (q *CQ) ReqNotify(solicitedOnly bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil {
		return fmt.Errorf("ibverbs: req_notify: %w", verbs.ErrDestroyed)
	}
	if q.ch == nil {
		return fmt.Errorf("ibverbs: CQ has no completion channel: %w", verbs.ErrInvalidAttr)
	}
	s := C.int(0)
	if solicitedOnly {
		s = 1
	}
	if rc := C.goroce_req_notify(q.cq, s); rc != 0 {
		return verbErr("ibv_req_notify_cq", int(rc), "")
	}
	return nil
}

// Destroy destroys the CQ (ibv_destroy_cq). While a QP uses it the kernel
// refuses (EBUSY): the error matches verbs.ErrBusy and the CQ stays.
// Destroying twice, or after Close, returns nil.
func (q *CQ) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil {
		return nil
	}
	if rc, errno := C.ibv_destroy_cq(q.cq); rc != 0 {
		return verbErr("ibv_destroy_cq", rcErrno(int(rc), errno), "")
	}
	q.forget()
	q.ctx.untrack(q)
	if q.ch != nil {
		q.ch.wake(q) // a PollWait on q returns its error
	}
	return nil
}

// forget drops a destroyed CQ's C memory and its entries in the maps.
// Called with q.mu held.
func (q *CQ) forget() {
	if q.ch != nil {
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.cq)
		q.ch.mu.Unlock()
	}
	q.ctx.mu.Lock()
	delete(q.ctx.cqs, q.cq)
	q.ctx.mu.Unlock()
	C.free(unsafe.Pointer(q.scratch))
	C.free(unsafe.Pointer(q.out))
	q.cq, q.ex, q.scratch, q.out = nil, nil, nil, nil
}

// Close is Destroy (io.Closer).
func (q *CQ) Close() error { return q.Destroy() }

func (q *CQ) rank() int { return 4 }

func (q *CQ) kill() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq != nil {
		C.ibv_destroy_cq(q.cq)
		q.forget()
	}
}
