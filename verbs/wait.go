package verbs

import (
	"context"
	"fmt"
)

// PollWait returns completions of cq, waiting for them on ch, cq's
// completion channel, without spinning: it polls cq; when cq is empty, it
// arms it (ReqNotify), polls once more (a completion may have come between
// the poll and the arming, and would raise no event), and waits on ch; an
// event starts the cycle again. It moves up to len(wc) completions into wc
// and returns how many (at least one), or ctx's error when ctx ends first,
// or an error matching ErrDestroyed when ch or cq is destroyed or their
// context closed, or cq's fatal error (CQ.Err: ErrCQOverrun) once the
// completions cq still holds are polled: a CQ failing under a waiter wakes
// it.
//
// The events PollWait takes off ch are consumed: when ch serves several
// CQs, an event of another CQ is lost to other waiters (PollWait polls cq
// again and waits on). Give each CQ waited on this way its own channel, or
// use one PollWait caller per channel.
func PollWait(ctx context.Context, ch CompChannel, cq CQ, wc []WC) (int, error) {
	if ch == nil || cq == nil || len(wc) == 0 {
		return 0, fmt.Errorf("verbs: PollWait needs a channel, a CQ and room for a completion: %w", ErrInvalidAttr)
	}
	for {
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if err := cq.Err(); err != nil {
			return 0, err
		}
		if err := cq.ReqNotify(false); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if err := cq.Err(); err != nil {
			return 0, err
		}
		if _, err := ch.Wait(ctx); err != nil {
			return 0, err
		}
	}
}
