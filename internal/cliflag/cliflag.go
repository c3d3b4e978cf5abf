package cliflag

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"time"
)

// Parse parses args, allowing operands between flags as getopt does
// (ibv_rc_pingpong HOST -n 10). Parsed operands are left in fs.Args(). ok is
// false when the command must end with code: 0 after -h, 2 on a bad flag
// (fs has printed why).
func Parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return 0, false
			}
			return 2, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			operands = append(operands, rest...) // after "--": operands only
			break
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
	fs.Parse(append([]string{"--"}, operands...))
	return 0, true
}

// ParseHost is Parse for a command that takes at most one operand, the
// host to connect to (none: listen, as a server): it returns the host, or
// ends the command with code when Parse does or with 2 after fs's usage
// when more than one operand was given.
func ParseHost(fs *flag.FlagSet, args []string) (host string, code int, ok bool) {
	if code, ok := Parse(fs, args); !ok {
		return "", code, false
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return "", 2, false
	}
	return fs.Arg(0), 0, true
}

// SplitShort turns getopt's grouped boolean flags ("-vV") into separate
// ones ("-v", "-V") when every letter of the group is one of letters;
// other arguments are left as they are.
func SplitShort(args []string, letters string) []string {
	var out []string
	for _, a := range args {
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.Trim(a[1:], letters) == "" {
			for _, r := range a[1:] {
				out = append(out, "-"+string(r))
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// Seconds is a flag.Value that sets *D from a duration given as seconds
// ("0.2", as ping takes it; at most 10^6) or with a unit ("200ms"); it is
// never negative.
type Seconds struct{ D *time.Duration }

// String returns the duration as time.Duration prints it.
func (s Seconds) String() string {
	if s.D == nil {
		return ""
	}
	return s.D.String()
}

// Set parses v.
func (s Seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 || f > 1e6 {
			return errors.New("out of range")
		}
		*s.D = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("not a duration (seconds, or with a unit: 200ms)")
	}
	*s.D = d
	return nil
}

// Given reports whether any of the named flags was set on the command line
// (fs parsed): a default the program chooses per case applies only when
// none was.
func Given(fs *flag.FlagSet, names ...string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			given = given || f.Name == n
		}
	})
	return given
}
