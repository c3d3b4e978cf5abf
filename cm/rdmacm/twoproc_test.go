//go:build linux

package rdmacm_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/leakcheck"
	"github.com/goroce/goroce/internal/netns"
)

// The environment of TestTwoProcessesNetns's processes.
const (
	envRole   = "GOROCE_RDMACM_ROLE" // "serve" or "dial"
	envAddr   = "GOROCE_RDMACM_ADDR"
	envTarget = "GOROCE_RDMACM_TARGET" // serve: the listen address; dial: the server's
)

// TestTwoProcessesNetns runs ExampleDialConn's server and client as two
// processes (this test binary again) in two network namespaces joined by
// veth, the client started first: the data arrives, and each process,
// once its program has returned, has no goroutine of goroce's left and no
// descriptor open that it did not have before.
func TestTwoProcessesNetns(t *testing.T) {
	if os.Getenv(envRole) != "" {
		t.Skip("this is one of the test's processes")
	}
	netns.Require(t)
	p := netns.NewPair(t, netns.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(ns *netns.NS, role, addr, target string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, os.Args[0],
			"-test.run=^TestTwoProcessesRole$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envRole+"="+role, envAddr+"="+addr, envTarget+"="+target)
		return cmd
	}
	client := run(p.A, "dial", p.AddrA.String(), p.AddrB.String()+":7473")
	server := run(p.B, "serve", p.AddrB.String(), ":7473")
	type out struct {
		b   []byte
		err error
	}
	cdone := make(chan out, 1)
	go func() { b, err := client.CombinedOutput(); cdone <- out{b, err} }()
	time.Sleep(100 * time.Millisecond) // the client dials a server not yet there
	sb, serr := server.CombinedOutput()
	c := <-cdone
	for _, o := range []struct {
		name string
		b    []byte
		err  error
		want []string
	}{
		{"server", sb, serr, []string{`RESULT: WRITE "hello, WRITE!", SEND "hello, SEND!"`, "LEAKS: none"}},
		{"client", c.b, c.err, []string{"RESULT: ok", "LEAKS: none"}},
	} {
		if o.err != nil {
			t.Errorf("the %s process: %v\n%s", o.name, o.err, o.b)
			continue
		}
		t.Logf("the %s process:\n%s", o.name, o.b)
		for _, w := range o.want {
			if !strings.Contains(string(o.b), w) {
				t.Errorf("the %s process did not say %q:\n%s", o.name, w, o.b)
			}
		}
	}
}

// TestTwoProcessesRole is one process of TestTwoProcessesNetns.
func TestTwoProcessesRole(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("a process of TestTwoProcessesNetns: runs only in the processes that test starts")
	}
	before := leakcheck.FDs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr, target := os.Getenv(envAddr), os.Getenv(envTarget)
	switch role {
	case "serve":
		got, err := serve(ctx, addr, target)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("RESULT: %s", got)
	case "dial":
		if err := dial(ctx, addr, target); err != nil {
			t.Fatal(err)
		}
		t.Log("RESULT: ok")
	}
	if err := leakcheck.Check(before, leakcheck.Wait); err != nil {
		t.Fatalf("LEAKS: %v", err)
	}
	t.Log("LEAKS: none")
}
