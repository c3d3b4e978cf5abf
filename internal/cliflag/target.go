package cliflag

import (
	"errors"
	"time"
)

// Target is a flag.Value that sets *Delay, a congestion control's delay
// target (soft.OpenOptions.TargetDelay), from a duration ("50us") or
// "off" (a negative Delay: no delay response). Not given, *Delay stays 0,
// the default.
type Target struct{ Delay *time.Duration }

// maxTarget is the largest delay target Set takes: beyond it the delay
// response never acts on a path that is not already losing packets.
const maxTarget = time.Second

// String returns the target ("" for the default, so that the flag
// package prints its own).
func (t Target) String() string {
	switch {
	case t.Delay == nil || *t.Delay == 0:
		return ""
	case *t.Delay < 0:
		return "off"
	}
	return t.Delay.String()
}

// Set parses v.
func (t Target) Set(v string) error {
	if v == "off" {
		*t.Delay = -1
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > maxTarget {
		return errors.New("want a duration above 0 and at most 1s (e.g. 50us), or off")
	}
	*t.Delay = d
	return nil
}
