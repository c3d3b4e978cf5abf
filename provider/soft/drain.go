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

// WaitResponses sends the ACK the QP's responder holds back for a reply
// (engine.Config.AckDelay) at once, and waits until the responder has
// handed every response it queued to the packet path (Responses is 0), at
// most limit; it reports whether it did. Call it before destroying an RC
// QP whose peer's last message has just been received: the ACK of that
// message waits for a reply that will not come, then for the driver's
// timer, which on a loaded machine may run late; destroyed first, the QP
// never sends it, and the peer resends its message until its retry count
// runs out.
func (q *QP) WaitResponses(limit time.Duration) bool {
	q.d.mu.Lock()
	if !q.dead.Load() && !q.d.closed.Load() {
		q.qp.ReleaseACK()
	}
	q.d.mu.Unlock()
	q.d.kick() // sends it now when nobody uses the packet path, else rings the driver
	t0 := time.Now()
	for q.Responses() > 0 {
		if time.Since(t0) >= limit {
			return false
		}
		q.d.ring() // a parked driver runs a round, which sends what is queued
		time.Sleep(50 * time.Microsecond)
	}
	return true
}
