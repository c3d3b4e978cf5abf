package cliflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestParseInterspersed(t *testing.T) {
	for _, c := range []struct {
		args []string
		n    int
		ops  []string
	}{
		{[]string{"-n", "10", "host"}, 10, []string{"host"}},
		{[]string{"host", "-n", "10"}, 10, []string{"host"}},
		{[]string{"--iters=7", "host", "x"}, 7, []string{"host", "x"}},
		{[]string{"-n", "3", "--", "-host"}, 3, []string{"-host"}},
		{nil, 1000, nil},
	} {
		fs := newTestFlagSet()
		n := fs.Int("n", 1000, "")
		fs.IntVar(n, "iters", 1000, "")
		if _, ok := Parse(fs, c.args); !ok {
			t.Fatalf("%q: parse failed", c.args)
		}
		if *n != c.n || strings.Join(fs.Args(), ",") != strings.Join(c.ops, ",") {
			t.Errorf("%q: n %d operands %q; want %d %q", c.args, *n, fs.Args(), c.n, c.ops)
		}
	}
}

func TestParseEnds(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"host", "-help"}, 0},
		{[]string{"--bogus"}, 2},
		{[]string{"host", "-n", "x"}, 2},
	} {
		fs := newTestFlagSet()
		fs.Int("n", 0, "")
		if code, ok := Parse(fs, c.args); ok || code != c.code {
			t.Errorf("%q: code %d ok %v, want %d false", c.args, code, ok, c.code)
		}
	}
}

// TestParseHost: no operand is no host (a server), one is the host, two
// print the usage and end with 2, and a bad flag or -h ends as Parse ends.
func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		args  []string
		host  string
		code  int
		ok    bool
		usage bool
	}{
		{nil, "", 0, true, false},
		{[]string{"-n", "3"}, "", 0, true, false},
		{[]string{"peer", "-n", "3"}, "peer", 0, true, false},
		{[]string{"a", "b"}, "", 2, false, true},
		{[]string{"--bogus", "peer"}, "", 2, false, true}, // the flag package prints the usage
		{[]string{"-h"}, "", 0, false, true},
	} {
		fs := newTestFlagSet()
		fs.Int("n", 0, "")
		usage := false
		fs.Usage = func() { usage = true }
		host, code, ok := ParseHost(fs, c.args)
		if host != c.host || code != c.code || ok != c.ok || (usage && !c.usage) || (c.usage && !usage) {
			t.Errorf("%q: host %q code %d ok %v usage %v; want %q %d %v %v", c.args, host, code, ok, usage, c.host, c.code, c.ok, c.usage)
		}
	}
}

func TestSplitShort(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"-vV -c", "-v -V -c"},
		{"-sVd -C 3", "-s -V -d -C 3"},
		{"-vx", "-vx"},     // x is not one of the letters
		{"--vV", "--vV"},   // long flags stay
		{"-v vV", "-v vV"}, // operands stay
		{"-S 100 -a", "-S 100 -a"},
		{"", ""},
	} {
		got := strings.Join(SplitShort(strings.Fields(c.in), "scvVdPq"), " ")
		if got != c.want {
			t.Errorf("SplitShort(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0.2", 200 * time.Millisecond, true},
		{"2", 2 * time.Second, true},
		{"0", 0, true},
		{"200ms", 200 * time.Millisecond, true},
		{"1m30s", 90 * time.Second, true},
		{"-1", 0, false},
		{"1e7", 0, false},
		{"-5ms", 0, false},
		{"soon", 0, false},
	} {
		d := time.Hour
		err := Seconds{&d}.Set(c.in)
		if c.ok && (err != nil || d != c.want) {
			t.Errorf("Set(%q) = %v, %v; want %v", c.in, d, err, c.want)
		}
		if !c.ok && (err == nil || d != time.Hour) {
			t.Errorf("Set(%q) = %v, %v; want an error and no change", c.in, d, err)
		}
	}
	d := 1500 * time.Millisecond
	if s := (Seconds{&d}).String(); s != "1.5s" {
		t.Errorf("String = %q", s)
	}
	if s := (Seconds{}).String(); s != "" {
		t.Errorf("zero String = %q", s)
	}
}

// TestOff: an Off flag is on by default, --gso=false turns it off, --gso
// alone and --gso=true keep it on, and a non-boolean is refused.
func TestOff(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		off, ok bool
	}{
		{nil, false, true},
		{[]string{"--gso=false"}, true, true},
		{[]string{"--gso"}, false, true},
		{[]string{"--gso=true"}, false, true},
		{[]string{"--gso=maybe"}, false, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var off bool
		fs.Var(Off{Off: &off}, "gso", "")
		err := fs.Parse(tc.args)
		if (err == nil) != tc.ok || off != tc.off {
			t.Errorf("%q: off %v, err %v; want off %v, ok %v", tc.args, off, err, tc.off, tc.ok)
		}
	}
}

func TestGiven(t *testing.T) {
	fs := newTestFlagSet()
	fs.Int("n", 1, "")
	fs.Int("x", 1, "")
	fs.Bool("v", false, "")
	if _, ok := Parse(fs, []string{"-n", "3"}); !ok {
		t.Fatal("parse failed")
	}
	if !Given(fs, "x", "n") || Given(fs, "v") || Given(fs) {
		t.Errorf("Given: n set, v not: got n %v, v %v, none %v", Given(fs, "x", "n"), Given(fs, "v"), Given(fs))
	}
}
