package agent_test

import (
	"bufio"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildGoroce builds the goroce command for the test.
func buildGoroce(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "goroce")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/goroce/goroce/cmd/goroce").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// goroce probe agent as a process on loopback: usage errors, a pinglist
// without this node, SIGHUP reloading a changed file (changed so that the
// watcher cannot tell: same size, modification time put back) and keeping
// the old list when the new one is bad, and SIGTERM ending it with status 0.
func TestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds goroce")
	}
	bin := buildGoroce(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pinglist.yaml")
	port := freePort(t, 6)
	self := addr(5)
	nodes := func(other string) string {
		return strings.Replace(pinglist(port, "a/5/g1", other+"/4/g1"), addr(5).String(), self.String(), 1)
	}
	write(t, path, nodes("b"))

	for _, tt := range []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"no config", []string{"probe", "agent"}, 2, "--config is required"},
		{"operand", []string{"probe", "agent", "--config", path, "extra"}, 2, "usage:"},
		{"bad log level", []string{"probe", "agent", "--config", path, "--log-level", "loud"}, 2, "--log-level"},
		{"not in the pinglist", []string{"probe", "agent", "--config", path, "--addr", addr(3).String(), "--path", "udp", "--listen", "127.0.0.1:0"}, 1, "not in the pinglist"},
		{"no pinglist", []string{"probe", "agent", "--config", filepath.Join(dir, "none.yaml"), "--addr", self.String(), "--path", "udp"}, 1, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			out, err := cmd.CombinedOutput()
			status := 0
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || !strings.Contains(string(out), tt.want) {
				t.Errorf("status %d, want %d; output:\n%s", status, tt.status, out)
			}
		})
	}

	var stderr testenv.Buffer
	cmd := exec.Command(bin, "probe", "agent", "--config", path, "--addr", self.String(), "--path", "udp",
		"--listen", fmt.Sprintf("%s:%d", self, port))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agent's log:\n%s", stderr.String())
		}
	}()
	base := fmt.Sprintf("http://%s:%d", self, port)
	metric := func(name, labels string) float64 {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+labels) + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	waitFor(t, 20*time.Second, "the agent's metrics", func() bool { return metric("goroce_probe_agent_targets", "") == 1 })

	// Same size, old modification time: only SIGHUP reloads it.
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, nodes("c"))
	os.Chtimes(path, fi.ModTime(), fi.ModTime())
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the reload on SIGHUP", func() bool {
		return metric("goroce_probe_agent_reloads_total", `{result="ok"}`) == 1
	})
	// The agent logs before it reloads, but its stderr reaches the buffer
	// through a pipe and exec's copying goroutine: the metric can be read
	// first.
	waitFor(t, 5*time.Second, "the SIGHUP in the agent's log", func() bool {
		return strings.Contains(stderr.String(), "SIGHUP: reloading the pinglist")
	})
	waitFor(t, 5*time.Second, "the new target in the discovery log", func() bool {
		return strings.Contains(stderr.String(), "target=c")
	})

	// A bad file: counted, the agent goes on with the list it has.
	if err := os.WriteFile(path, []byte("nodes: [{name: a"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the failed reload", func() bool {
		return metric("goroce_probe_agent_reloads_total", `{result="error"}`) >= 1
	})
	if got := metric("goroce_probe_agent_targets", ""); got != 1 {
		t.Errorf("targets = %v after a bad file", got)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("agent exited with %v after SIGTERM", waitErr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent still running 15 s after SIGTERM")
	}
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "level=ERROR") && !strings.Contains(sc.Text(), "pinglist reload failed") && !strings.Contains(sc.Text(), "unreadable") {
			t.Errorf("unexpected error: %s", sc.Text())
		}
	}
}
