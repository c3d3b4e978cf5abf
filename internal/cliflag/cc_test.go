package cliflag

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/goroce/goroce/engine"
)

// TestCC: --cc takes off, loss and ecn, leaves the zero mode (the engine's
// default, ecn) when not given, refuses anything else with the names it
// takes, and its help shows the default.
func TestCC(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want engine.CCMode
		ok   bool
	}{
		{nil, engine.CCDefault, true},
		{[]string{"--cc", "off"}, engine.CCOff, true},
		{[]string{"--cc=loss"}, engine.CCLoss, true},
		{[]string{"-cc", "ecn"}, engine.CCECN, true},
		{[]string{"--cc", "ECN"}, engine.CCDefault, false},
		{[]string{"--cc", "dcqcn"}, engine.CCDefault, false},
		{[]string{"--cc", ""}, engine.CCDefault, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		var m engine.CCMode
		fs.Var(CC{Mode: &m}, "cc", "congestion control")
		err := fs.Parse(tc.args)
		if (err == nil) != tc.ok || m != tc.want {
			t.Errorf("%q: mode %v, err %v; want %v, ok %v", tc.args, m, err, tc.want, tc.ok)
		}
		if !tc.ok && !strings.Contains(out.String(), "want off, loss or ecn") {
			t.Errorf("%q: error output %q names no mode", tc.args, out.String())
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	m := engine.CCECN
	fs.Var(CC{Mode: &m}, "cc", "congestion control")
	fs.PrintDefaults()
	if !strings.Contains(out.String(), "(default ecn)") {
		t.Errorf("help %q shows no default", out.String())
	}
	if s := (CC{}).String(); s != "" {
		t.Errorf("zero String = %q", s)
	}
}
