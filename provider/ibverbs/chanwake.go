//go:build linux && cgo && ibverbs

package ibverbs

import "time"

// wake hands q to one of the channel's waiters as if an event of q came,
// when q was destroyed or failed (IBV_EVENT_CQ_ERR): PollWait then finds
// q's error (CQ.Err) instead of waiting for an event that never comes.
func (c *CompChannel) wake(q *CQ) {
	c.mu.Lock()
	c.woken = append(c.woken, q)
	c.mu.Unlock()
	c.life.RLock()
	if c.ch != nil {
		c.f.SetReadDeadline(time.Unix(1, 0)) // the waiters look again (waitReadable)
	}
	c.life.RUnlock()
}

// takeWoken returns a CQ wake handed on, or nil.
func (c *CompChannel) takeWoken() *CQ {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.woken) == 0 {
		return nil
	}
	q := c.woken[0]
	c.woken = c.woken[1:]
	return q
}
