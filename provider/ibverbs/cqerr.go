//go:build linux && cgo && ibverbs

package ibverbs

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
)

var (
	errCQDestroyed = fmt.Errorf("ibverbs: CQ destroyed: %w", verbs.ErrDestroyed)
	errCQOverrun   = fmt.Errorf("ibverbs: the CQ is in error (overrun): %w", verbs.ErrCQOverrun)
)

// Err returns nil while the CQ works; an error matching verbs.ErrCQOverrun
// once polling it failed (the CQ is in error: an overrun) or
// GetAsyncEvent returned its IBV_EVENT_CQ_ERR; an error matching
// verbs.ErrDestroyed once it was destroyed or its context closed.
func (q *CQ) Err() error {
	if q.failed.Load() {
		return errCQOverrun
	}
	q.mu.Lock()
	gone := q.cq == nil
	q.mu.Unlock()
	if gone {
		return errCQDestroyed
	}
	return nil
}
