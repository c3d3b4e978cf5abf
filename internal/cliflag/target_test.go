package cliflag

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestTarget: --cc-target takes a duration or off (a negative delay),
// leaves 0 (the default) when not given, refuses zero, negative, huge and
// malformed values with what it takes, and prints what it holds.
func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		ok   bool
	}{
		{nil, 0, true},
		{[]string{"--cc-target", "50us"}, 50 * time.Microsecond, true},
		{[]string{"--cc-target=1ms"}, time.Millisecond, true},
		{[]string{"--cc-target", "off"}, -1, true},
		{[]string{"--cc-target", "0"}, 0, false},
		{[]string{"--cc-target", "-5us"}, 0, false},
		{[]string{"--cc-target", "2s"}, 0, false},
		{[]string{"--cc-target", "50"}, 0, false},
		{[]string{"--cc-target", "OFF"}, 0, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		var d time.Duration
		fs.Var(Target{Delay: &d}, "cc-target", "delay target")
		err := fs.Parse(tc.args)
		if (err == nil) != tc.ok || d != tc.want {
			t.Errorf("%q: delay %v, err %v; want %v, ok %v", tc.args, d, err, tc.want, tc.ok)
		}
		if !tc.ok && !strings.Contains(out.String(), "want a duration above 0 and at most 1s (e.g. 50us), or off") {
			t.Errorf("%q: error output %q says not what it takes", tc.args, out.String())
		}
	}
	for d, want := range map[time.Duration]string{0: "", -1: "off", 25 * time.Microsecond: "25µs"} {
		if got := (Target{Delay: &d}).String(); got != want {
			t.Errorf("String of %v: %q, want %q", d, got, want)
		}
	}
	if got := (Target{}).String(); got != "" {
		t.Errorf("String of a Target without a Delay: %q, want \"\"", got)
	}
}
