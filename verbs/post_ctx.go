package verbs

import (
	"context"
	"errors"
	"runtime"
	"time"
)

// PostSendContext posts wrs on qp in order as QP.PostSend does, but when
// the send queue is full (ErrQueueFull) it waits for room, as completed
// work requests free it, until ctx ends. It returns how many it posted and
// nil, or, as PostSend, fewer and the error that stopped it (ctx's error
// when ctx ended first; any other post error at once). With room in the
// queue it costs one PostSend and does not allocate.
//
// The room comes from the peer's acknowledgements; it does not depend on
// polling the CQ, but a signaled request's completion must still find room
// in its CQ: poll it.
func PostSendContext(ctx context.Context, qp QP, wrs []SendWR) (int, error) {
	return postContext(ctx, wrs, qp.PostSend)
}

// PostRecvContext is PostSendContext for receive requests: it waits for
// room in the receive queue (as received messages consume receives).
func PostRecvContext(ctx context.Context, qp QP, wrs []RecvWR) (int, error) {
	return postContext(ctx, wrs, qp.PostRecv)
}

// Waits for room start by yielding (the provider's goroutines may be
// about to free it), then sleep, doubling from roomWaitMin to roomWaitMax.
const (
	roomYields  = 8
	roomWaitMin = 10 * time.Microsecond
	roomWaitMax = time.Millisecond
)

func postContext[W any](ctx context.Context, wrs []W, post func([]W) (int, error)) (int, error) {
	total := 0
	var timer *time.Timer
	wait := roomWaitMin
	tries := 0
	for {
		n, err := post(wrs[total:])
		total += n
		if err == nil || !errors.Is(err, ErrQueueFull) {
			return total, err
		}
		if n > 0 {
			tries, wait = 0, roomWaitMin
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if tries++; tries <= roomYields {
			runtime.Gosched()
			continue
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return total, ctx.Err()
		}
		wait = min(2*wait, roomWaitMax)
	}
}
