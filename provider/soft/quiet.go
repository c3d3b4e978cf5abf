package soft

import "time"

// WaitQuiet waits until the device has sent and received nothing for quiet,
// and at most for limit; it reports whether the device went quiet. Programs
// call it after their last message and before destroying their QPs, so that
// the final ACKs leave (and leave again if the peer retransmits) while the
// QPs still exist: otherwise the peer's last send may never complete.
func (d *Device) WaitQuiet(quiet, limit time.Duration) bool {
	t0 := time.Now()
	last, since := d.Stats(), t0
	step := max(quiet/4, time.Millisecond)
	for time.Since(t0) < limit {
		time.Sleep(step)
		s := d.Stats()
		if s.TxPackets != last.TxPackets || s.RxPackets != last.RxPackets {
			last, since = s, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}
