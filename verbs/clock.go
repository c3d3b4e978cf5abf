package verbs

import "time"

// Now returns the time in nanoseconds on the clock of WC.Timestamp: Unix
// time (CLOCK_REALTIME), the clock the kernel stamps received packets with
// (SO_TIMESTAMPNS), so that a provider may stamp a receive completion with
// its packet's arrival. Differences of Now readings are durations as long
// as the wall clock is not stepped between them (NTP slews it; a step
// shows in the measurements that span it).
func Now() int64 { return time.Now().UnixNano() }
