package soft

import "time"

// Responses returns how many responses the QP's responder has queued and
// not yet handed to the packet path (engine.QP.Responses): ACKs, one held
// back for a reply among them, NAKs, READ responses and atomic replies.
// 0 once the QP is destroyed or the device closed.
func (q *QP) Responses() int {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	if q.dead.Load() || q.d.closed.Load() {
		return 0
	}
	return q.qp.Responses()
}

// WaitResponses waits until the QP's responder has handed every response
// it queued to the packet path (Responses is 0), and at most limit; it
// reports whether it did. Call it before destroying an RC QP whose peer's
// last message has just been received: the ACK of that message may be
// held back for a reply (engine.Config.AckDelay) that will never come, and
// the driver's timer that sends it needs the driver to run, which on a
// loaded machine may take milliseconds; destroyed first, the ACK is never
// sent and the peer retransmits until its retry count runs out.
func (q *QP) WaitResponses(limit time.Duration) bool {
	t0 := time.Now()
	for q.Responses() > 0 {
		if time.Since(t0) >= limit {
			return false
		}
		q.d.ring() // a parked driver runs a round, which sends a held ACK once due
		time.Sleep(50 * time.Microsecond)
	}
	return true
}
