package verbs

import "time"

// epoch anchors Now: the wall-clock time at which the package was loaded,
// carrying Go's monotonic reading. It is set once and never changed.
var epoch = time.Now()

// Now returns the time in nanoseconds on the clock of WC.Timestamp: the
// Unix time of process start plus the monotonic time elapsed since, so that
// it never jumps when the wall clock is stepped. Differences of Now
// readings are exact durations; readings taken in different processes on
// one host agree to within the wall-clock error at their starts.
func Now() int64 { return epoch.UnixNano() + int64(time.Since(epoch)) }
