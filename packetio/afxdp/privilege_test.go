//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/afxdp"
)

// Without privileges (the test binary re-run as user nobody, with no
// capabilities, inside a namespace with a veth) Listen fails with an error
// matching ErrPermission and packetio.ErrNotSupported, so that a caller
// falls back to the UDP path.
func TestNetnsWithoutPrivilege(t *testing.T) {
	if addr := os.Getenv("GOROCE_AFXDP_UNPRIVILEGED"); addr != "" {
		_, err := afxdp.Listen(netip.MustParseAddr(addr), afxdp.Options{})
		fmt.Printf("listen error: %v\n", err)
		if !errors.Is(err, afxdp.ErrPermission) || !errors.Is(err, packetio.ErrNotSupported) {
			t.Fatalf("Listen without privileges: %v; want ErrPermission", err)
		}
		return
	}
	p := newPair(t)
	// A copy of the test binary that user nobody may run.
	dir, err := os.MkdirTemp("", "goroce-afxdp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "afxdp.test")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(bin, exe); err != nil {
		t.Fatal(err)
	}
	var out []byte
	err = p.A.Do(func() error { // the child starts on this thread: in the namespace
		cmd := exec.Command(bin, "-test.run", "^TestNetnsWithoutPrivilege$", "-test.v")
		cmd.Env = append(os.Environ(), "GOROCE_AFXDP_UNPRIVILEGED="+p.AddrA.String())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("unprivileged run: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "listen error:") {
			t.Log(l)
		}
	}
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
