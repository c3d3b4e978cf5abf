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
	l := lib(t)
	bin := filepath.Join(t.TempDir(), "misuse")
	if out, err := exec.Command("gcc", "-Wall", "-o", bin, "testdata/misuse.c", "-libverbs").CombinedOutput(); err != nil {
		testenv.Skipf(t, testenv.CPrograms, "cannot build testdata/misuse.c against libibverbs: %v\n%s", err, out)
	}
	out, err := run(t, preload.Options{Addrs: []string{"127.0.34.3"}, Path: "udp", Lib: l}, bin)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^ok \d+$`).MatchString(out) {
		t.Errorf("misuse.c:\n%s", out)
	}
}
