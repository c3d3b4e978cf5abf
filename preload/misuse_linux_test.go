package preload_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/preload"
)

// TestMisuse runs testdata/misuse.c, a table of bad calls from C (NULL,
// destroyed objects, wrong masks, objects still in use), each checked for
// libibverbs' errno: the program must report every check passed, and not
// die of a signal.
func TestMisuse(t *testing.T) {
	out := runC(t, "misuse.c", "127.0.34.3")
	if !regexp.MustCompile(`(?m)^ok \d+$`).MatchString(out) {
		t.Errorf("misuse.c:\n%s", out)
	}
}

// TestThreads runs testdata/threads.c: four threads of one process, one
// context and PD, each with its own completion channel, CQ and UD QP,
// sending to themselves and sleeping on their channels at once.
func TestThreads(t *testing.T) {
	out := runC(t, "threads.c", "127.0.34.4")
	if !regexp.MustCompile(`(?m)^ok 4 threads x 300 messages$`).MatchString(out) {
		t.Errorf("threads.c:\n%s", out)
	}
}

// runC builds testdata/src against libibverbs and runs it on the library
// with a device on addr; it fails t if the program fails (or dies).
func runC(t *testing.T, src, addr string) string {
	l := lib(t)
	bin := filepath.Join(t.TempDir(), "prog")
	if out, err := exec.Command("gcc", "-Wall", "-O2", "-pthread", "-o", bin, filepath.Join("testdata", src), "-libverbs").CombinedOutput(); err != nil {
		testenv.Skipf(t, testenv.CPrograms, "cannot build testdata/%s against libibverbs: %v\n%s", src, err, out)
	}
	out, err := run(t, preload.Options{Addrs: []string{addr}, Path: "udp", Lib: l}, bin)
	if err != nil {
		t.Fatalf("%s: %v\n%s", src, err, out)
	}
	return out
}

// TestFork runs testdata/fork.c: a program forks and its child execs while
// its verbs objects live; the parent's MR and QP work before and after.
func TestFork(t *testing.T) {
	out := runC(t, "fork.c", "127.0.34.5")
	if !regexp.MustCompile(`(?m)^ok$`).MatchString(out) {
		t.Errorf("fork.c:\n%s", out)
	}
}

// TestWRAPI runs testdata/wrapi.c: the extended QP's ibv_wr_* calls (a
// batch of two sends, one inline from unregistered memory), what
// ibv_create_qp_ex refuses, and ibv_qp_to_qp_ex of a plain QP.
func TestWRAPI(t *testing.T) {
	out := runC(t, "wrapi.c", "127.0.34.6")
	if !regexp.MustCompile(`(?m)^ok$`).MatchString(out) {
		t.Errorf("wrapi.c:\n%s", out)
	}
}
