package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestImageBuild builds goroce as deploy/Dockerfile's build stage does,
// with the same environment, tags and flags read from the file (docker is
// not here), and checks that the binary is the libibverbs build: linked
// to libibverbs, and `goroce devices` lists the soft device beside what
// libibverbs finds (the fallback on a node without an RNIC).
func TestImageBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds goroce with cgo")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		testenv.Skip(t, testenv.Ibverbs, "libibverbs-dev not installed: ", err)
	}
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUN ((?:[A-Z_]+=\S+ )*)go build (.*) -o /goroce (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("no `RUN ... go build ... -o /goroce ./cmd/goroce` in the Dockerfile")
	}
	env, flags, pkg := strings.Fields(m[1]), strings.Fields(m[2]), m[3]
	if !strings.Contains(m[2], "-tags ibverbs") || !strings.Contains(m[1], "CGO_ENABLED=1") {
		t.Errorf("the image is not built with the libibverbs provider: %q", m[0])
	}
	bin := filepath.Join(t.TempDir(), "goroce")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, pkg)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	if out, err := exec.Command("ldd", bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "libibverbs.so") {
		t.Errorf("the image's goroce is not linked to libibverbs: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "devices").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "soft0") {
		t.Errorf("goroce devices: %v\n%s", err, out)
	}
	t.Logf("goroce devices (the image's build):\n%s", out)
}
