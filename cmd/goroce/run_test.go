package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/preload"
)

// TestRunEnv: goroce run hands the program the library first in LD_PRELOAD
// (before one the caller had) and the devices' environment.
func TestRunEnv(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("goroce run's programs are Linux programs")
	}
	lib := filepath.Join(t.TempDir(), preload.LibName)
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LD_PRELOAD", "")
	os.Unsetenv("LD_PRELOAD")
	var out, errb bytes.Buffer
	// env runs without loading the (empty) library: the dynamic linker
	// only warns about a preload it cannot load.
	code := run([]string{"run", "--lib", lib, "--addr", "127.0.34.7,127.0.34.8", "--path", "udp", "--name", "a,b", "--", "env"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"LD_PRELOAD=" + lib, "GOROCE_ADDR=127.0.34.7,127.0.34.8", "GOROCE_PATH=udp", "GOROCE_DEVICE=a,b"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(out.String()) {
			t.Errorf("the program's environment has no %q:\n%s", want, out.String())
		}
	}
}

func TestRunErrors(t *testing.T) {
	t.Setenv(preload.EnvLib, filepath.Join(t.TempDir(), "missing.so"))
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--addr", "127.0.34.7", "--", "true"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), preload.EnvLib) {
		t.Errorf("missing library: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"run", "--addr", "not-an-address", "--", "true"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "address") {
		t.Errorf("bad address: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"run", "--addr", "127.0.34.7"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Errorf("no program: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"run", "--lib", "/dev/null", "--addr", "127.0.34.7", "--", "/nonexistent/program"}, &out, &errb); code != 127 {
		t.Errorf("no such program: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"run", "--lib", "/dev/null", "--addr", "127.0.34.7", "--", "sh", "-c", "exit 3"}, &out, &errb); code != 3 {
		t.Errorf("exit status not passed on: %d", code)
	}
}

// TestRunIbvDevices runs Debian's ibv_devices through goroce run with the
// library built from this repository.
func TestRunIbvDevices(t *testing.T) {
	if _, err := exec.LookPath("ibv_devices"); err != nil {
		testenv.Skip(t, testenv.CPrograms, "ibv_devices is not installed (apt-get install ibverbs-utils)")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		testenv.Skip(t, testenv.CPrograms, "libibverbs-dev is not installed")
	}
	lib := filepath.Join(t.TempDir(), preload.LibName)
	if b, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), preload.BuildArgs(lib)...).CombinedOutput(); err != nil {
		t.Fatalf("building the library: %v\n%s", err, b)
	}
	t.Setenv(preload.EnvLib, lib)
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--addr", "127.0.34.9", "--path", "udp", "--", "ibv_devices"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	if !regexp.MustCompile(`soft0\s+02005efffe002209`).MatchString(out.String()) {
		t.Errorf("ibv_devices under goroce run:\n%s", out.String())
	}
}
