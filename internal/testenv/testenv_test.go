package testenv

import "testing"

func TestListed(t *testing.T) {
	for _, tt := range []struct {
		list, suite string
		want        bool
	}{
		{"", Netns, false},
		{"netns", Netns, true},
		{"netns,afxdp", AFXDP, true},
		{" netns , afxdp ", AFXDP, true},
		{"netns,afxdp", Uring, false},
		{"netnsx", Netns, false},
		{"all", RxeVM, true},
	} {
		if got := listed(tt.list, tt.suite); got != tt.want {
			t.Errorf("listed(%q, %q) = %v, want %v", tt.list, tt.suite, got, tt.want)
		}
	}
}

// fakeT records what Skip does to a test.
type fakeT struct {
	testing.TB
	fatal, skipped string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Fatalf(format string, a ...any) { f.fatal = format }
func (f *fakeT) Skipf(format string, a ...any)  { f.skipped = format }

func TestSkipFailsWhenRequired(t *testing.T) {
	t.Setenv(EnvRequire, "netns,uring")
	f := &fakeT{}
	Skip(f, Uring, "no io_uring")
	if f.fatal == "" || f.skipped != "" {
		t.Errorf("a required suite's skip: fatal %q, skipped %q; want a failure", f.fatal, f.skipped)
	}
	f = &fakeT{}
	Skipf(f, AFXDP, "refused: %v", "EPERM")
	if f.fatal != "" || f.skipped == "" {
		t.Errorf("a suite not required: fatal %q, skipped %q; want a skip", f.fatal, f.skipped)
	}
}
