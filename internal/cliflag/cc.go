package cliflag

import (
	"errors"

	"github.com/goroce/goroce/engine"
)

// CC is a flag.Value that sets *Mode from a congestion control mode's name
// (engine.ParseCCMode: off, loss or ecn).
type CC struct{ Mode *engine.CCMode }

// String returns the mode's name ("" for a CC without a Mode, so that the
// flag package prints the default).
func (c CC) String() string {
	if c.Mode == nil {
		return ""
	}
	return c.Mode.String()
}

// Set parses v.
func (c CC) Set(v string) error {
	m, ok := engine.ParseCCMode(v)
	if !ok {
		return errors.New("want off, loss or ecn")
	}
	*c.Mode = m
	return nil
}
