//go:build linux && cgo && ibverbs

package ibverbs

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/goroce/goroce/verbs"
)

// cqExFlags are the fields every extended CQ's completions carry.
const cqExFlags = C.IBV_WC_EX_WITH_BYTE_LEN | C.IBV_WC_EX_WITH_IMM | C.IBV_WC_EX_WITH_QP_NUM | C.IBV_WC_EX_WITH_SRC_QP

// CQExOptions say what an extended CQ's completions carry beyond ibv_wc's
// fields.
type CQExOptions struct {
	// Timestamp: the device's raw completion timestamp
	// (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP), in device clock ticks.
	Timestamp bool
	// Wallclock: the completion time in nanoseconds
	// (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK).
	Wallclock bool
}

// CreateCQEx creates an extended completion queue (ibv_create_cq_ex) whose
// completions carry what opts asks for; PollEx reads them. A device that
// has no completion timestamps gives an error matching
// verbs.ErrNotSupported.
func (c *Context) CreateCQEx(cqe int, ch verbs.CompChannel, opts CQExOptions) (*CQ, error) {
	if opts.Timestamp || opts.Wallclock {
		var clock C.uint64_t
		var e C.int
		cc, err := c.enter()
		if err != nil {
			return nil, err
		}
		mask := C.goroce_ts_mask(cc, &clock, &e)
		c.leave()
		if e != 0 {
			return nil, verbErr("ibv_query_device_ex", int(e), c.dev.name)
		}
		if mask == 0 {
			return nil, fmt.Errorf("ibverbs: %s has no completion timestamps (completion_timestamp_mask 0): %w", c.dev.name, verbs.ErrNotSupported)
		}
	}
	return c.createCQ(cqe, ch, &opts)
}

// WCEx is a work completion of an extended CQ: the work completion and its
// timestamps (zero unless the CQ was made to carry them).
type WCEx struct {
	verbs.WC
	Timestamp uint64 // device clock ticks (ibv_wc_read_completion_ts)
	Wallclock uint64 // nanoseconds (ibv_wc_read_completion_wallclock_ns)
}

// PollEx moves up to len(wc) completions of an extended CQ into wc, with
// their timestamps (ibv_start_poll / ibv_next_poll / ibv_end_poll, one cgo
// call per 64). It does not allocate.
func (q *CQ) PollEx(wc []WCEx) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil {
		return 0, fmt.Errorf("ibverbs: poll: %w", verbs.ErrDestroyed)
	}
	if q.ex == nil {
		return 0, fmt.Errorf("ibverbs: PollEx on a CQ not made by CreateCQEx: %w", verbs.ErrInvalidAttr)
	}
	total := 0
	for total < len(wc) {
		n := min(len(wc)-total, batch)
		k := q.poll(n)
		if k < 0 {
			return total, verbErr("ibv_start_poll", -k, "")
		}
		out := unsafe.Slice(q.out, k)
		for i := range out {
			toWC(&out[i], &wc[total+i].WC)
			wc[total+i].Timestamp, wc[total+i].Wallclock = uint64(out[i].ts), uint64(out[i].wallclock)
		}
		total += k
		if k < n {
			break
		}
	}
	return total, nil
}
