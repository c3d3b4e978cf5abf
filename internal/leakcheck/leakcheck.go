// Package leakcheck checks, after a package's tests, that they left no
// goroutine of goroce's running and no file descriptor open that was not
// open before them. A package uses it from its TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
//
// Goroutines count as goroce's when a frame of their stack is in a
// github.com/goroce/goroce package (the runtime's, the testing package's
// and the standard library's own pools are left alone). Leaks may take a
// moment to end (a driver goroutine seeing its Conn closed), so the check
// waits up to Options.Wait before it reports. Descriptors are compared by
// number and target (/proc/self/fd): the Go runtime's own poller
// descriptors, opened lazily, are not counted.
package leakcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// Wait is how long Main waits for goroutines and descriptors to go away
// before reporting them.
const Wait = 5 * time.Second

// Main runs the tests and then the leak check, and exits: with the tests'
// status, or 1 when they passed but leaked. With -test.run or -test.bench
// selecting a subset the check still applies to what ran.
func Main(m *testing.M) {
	before := fds()
	code := m.Run()
	if code == 0 {
		if err := Check(before, Wait); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Check waits up to wait for goroce's goroutines to end and for the
// descriptors not in before to close, and returns an error listing those
// that remain.
func Check(before map[string]string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		gs, fs := goroutines(), newFDs(before)
		if len(gs) == 0 && len(fs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "leakcheck: the tests left %d goroutines and %d file descriptors behind", len(gs), len(fs))
			for _, f := range fs {
				fmt.Fprintf(&b, "\n  fd %s", f)
			}
			for _, g := range gs {
				fmt.Fprintf(&b, "\n\n%s", g)
			}
			return fmt.Errorf("%s", b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FDs returns the process's open descriptors, number to target.
func FDs() map[string]string { return fds() }

func fds() map[string]string {
	m := map[string]string{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return m
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the descriptor ReadDir itself used, closed since
		}
		m[e.Name()] = target
	}
	return m
}

// newFDs lists "n -> target" for descriptors open now and not in before,
// leaving out the runtime's poller (epoll and its eventfd or pipe).
func newFDs(before map[string]string) []string {
	var out []string
	for n, target := range fds() {
		if before[n] == target {
			continue
		}
		if target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" {
			continue
		}
		out = append(out, n+" -> "+target)
	}
	sort.Strings(out)
	return out
}

// goroutines returns the stacks of running goroutines that have a frame in
// a goroce package, other than this one's caller.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/goroce/goroce/") {
			continue
		}
		if strings.Contains(g, "github.com/goroce/goroce/internal/leakcheck.goroutines(") {
			continue // the goroutine running the check
		}
		if strings.Contains(g, "\nmain.main()") {
			continue // the test binary's main goroutine, in TestMain
		}
		out = append(out, g)
	}
	return out
}
