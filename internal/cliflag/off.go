package cliflag

import "strconv"

// Off is a boolean flag that is on by default and sets *Off when turned off
// (--gso=false), so that an options struct whose zero value means "on"
// keeps it on unless the user says otherwise.
type Off struct{ Off *bool }

// String returns "false" when the flag is turned off, else "true".
func (f Off) String() string {
	if f.Off != nil && *f.Off {
		return "false"
	}
	return "true"
}

// Set parses a boolean and stores its negation.
func (f Off) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.Off = !v
	return nil
}

// IsBoolFlag makes --gso mean --gso=true, as for a flag.Bool.
func (f Off) IsBoolFlag() bool { return true }
