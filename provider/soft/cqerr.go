package soft

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
)

var errCQDestroyed = fmt.Errorf("soft: CQ destroyed: %w", verbs.ErrDestroyed)

// Err returns nil while the CQ works; an error matching verbs.ErrCQOverrun
// once a completion found it full (IBV_EVENT_CQ_ERR); an error matching
// verbs.ErrDestroyed once it was destroyed or its context or device closed
// (Poll still gives what the CQ holds: after Device.Close, the completions
// the close flushed). It does not allocate.
func (c *CQ) Err() error {
	if c.destroyed.Load() {
		return errCQDestroyed
	}
	if c.cq.Overrun() {
		return errCQOverrun
	}
	if c.ctx != nil {
		if err := c.ctx.alive(); err != nil {
			return err
		}
	}
	return nil
}

var errCQOverrun = fmt.Errorf("soft: a completion found the CQ full: %w", verbs.ErrCQOverrun)

// wake puts the CQ on its completion channel, so that a PollWait waiting
// for it looks again and finds its error. Never blocks.
func (c *CQ) wake() {
	if c.ch == nil {
		return
	}
	select {
	case c.ch.ev <- c:
	default: // the channel holds events: its waiter wakes anyway
	}
}
