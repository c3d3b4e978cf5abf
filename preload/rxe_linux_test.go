package preload_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// rxeVM returns the rxe-vm harness directory and a build directory of the
// test's own (captures, the guest's share) holding the shared kernel and
// initrd, or skips.
func rxeVM(t *testing.T) (dir, build string) {
	dir = os.Getenv("GOROCE_RXE_VM")
	if dir == "" {
		testenv.Skip(t, testenv.RxeVM, "set GOROCE_RXE_VM to the rxe-vm harness directory (and RXE_VM_BUILD to its build directory) to run the C programs against Linux rdma_rxe in a qemu guest")
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, testenv.RxeVM, "the rxe-vm harness needs root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testenv.Skip(t, testenv.RxeVM, "the rxe-vm harness needs qemu-system-x86_64 (run its build.sh)")
	}
	src := os.Getenv("RXE_VM_BUILD")
	if src == "" {
		src = filepath.Join(dir, "build")
	}
	build = filepath.Join(t.TempDir(), "build")
	if err := os.MkdirAll(build, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinuz", "initrd.cpio"} {
		p, _ := filepath.Abs(filepath.Join(src, f))
		if _, err := os.Stat(p); err != nil {
			testenv.Skipf(t, testenv.RxeVM, "the rxe-vm harness is not built in %s: %v", src, err)
		}
		if err := os.Symlink(p, filepath.Join(build, f)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, build
}

// retrySh retries a client while its server is not up yet (the servers of
// a script start one after the other).
const retrySh = `retry() { i=0; while [ $i -lt 60 ]; do out=$("$@" 2>&1); rc=$?; ` +
	`if [ $rc = 0 ]; then echo "$out"; return 0; fi; ` +
	`if ! echo "$out" | grep -qE "Couldn't connect|Unable to init the socket|Unexpected CM event|rdma_connect|connect error|REJECTED|cma event"; then echo "$out"; return $rc; fi; ` +
	`sleep 0.5; i=$((i+1)); done; echo "$out"; return 1; }; `

// rxePrograms: each program's server and client arguments (SERVER is the
// server's address), and what the client's output shows on success.
var rxePrograms = []struct{ name, server, client, want string }{
	{"ibv_rc_pingpong", "-g 1 -n 10 -s 64", "-g 1 -n 10 -s 64 SERVER", `10 iters in`},
	{"ibv_ud_pingpong", "-g 1 -n 10 -s 64", "-g 1 -n 10 -s 64 SERVER", `10 iters in`},
	{"ib_write_bw", "-x 1 -F -n 20", "-x 1 -F -n 20 SERVER", `(?m)^\s*65536\s+20\s`},
	{"ib_send_lat", "-x 1 -F -n 20", "-x 1 -F -n 20 SERVER", `(?m)^\s*2\s+20\s`},
	{"ib_write_bw", "-x 1 -F -n 20 -R", "-x 1 -F -n 20 -R SERVER", `(?m)^\s*65536\s+20\s`},
	{"rping", "-s -a SERVER -C 5 -v", "-c -a SERVER -C 5 -v", `rdma-ping-4: `},
}

// TestRxeVM runs Debian's programs on libgoroce-verbs.so on this machine
// against the same programs on Linux rdma_rxe in the qemu guest, both ways
// (one boot each), and checks the captures with the wire checker.
func TestRxeVM(t *testing.T) {
	dir, build := rxeVM(t)
	l := lib(t)
	env := fmt.Sprintf("LD_PRELOAD=%s GOROCE_ADDR=$RXE_HOST_IP GOROCE_PATH=udp", l)
	for _, hostServer := range []bool{false, true} {
		name := "guest-server"
		if hostServer {
			name = "host-server"
		}
		t.Run(name, func(t *testing.T) {
			var guest, host []string
			progs := rxePrograms
			for _, p := range progs {
				gdev, hdev := "-d rxe0", "-d soft0"
				if p.name == "rping" {
					gdev, hdev = "", ""
				}
				if hostServer {
					host = append(host, fmt.Sprintf("%s %s %s %s", env, p.name, hdev, strings.ReplaceAll(p.server, "SERVER", "$RXE_HOST_IP")))
					// An rdma_cm client waits for its server (which starts
					// when the one before ends) rather than retry: a REQ
					// that Linux's CM gave up on would reach the next
					// server stale.
					wait := ""
					if p.name == "rping" || strings.Contains(p.client, "-R") {
						wait = "sleep 3; "
					}
					guest = append(guest, fmt.Sprintf("{ %sretry %s %s %s; }", wait, p.name, gdev, strings.ReplaceAll(p.client, "SERVER", "10.99.0.1")))
				} else {
					guest = append(guest, fmt.Sprintf("%s %s %s", p.name, gdev, strings.ReplaceAll(p.server, "SERVER", "10.99.0.2")))
					host = append(host, fmt.Sprintf("retry env %s %s %s %s", env, p.name, hdev, strings.ReplaceAll(p.client, "SERVER", "$RXE_GUEST_IP")))
				}
			}
			args := []string{"/tmp/rxe-vm.lock", filepath.Join(dir, "run-peer.sh"), "-t", "240", "-l", "preload-" + name}
			gcmd, hcmd := strings.Join(guest, " && "), strings.Join(host, " && ")
			if hostServer {
				args = append(args, "-r", "-d", "2")
				gcmd = retrySh + gcmd
			} else {
				args = append(args, "-w", "18515")
				hcmd = retrySh + hcmd
			}
			cmd := exec.Command("flock", append(args, gcmd, hcmd)...)
			// A namespace of its own, as internal/rxeinterop's: the guest's
			// bridge and tap live in it, beside any other guest.
			cmd.Env = append(os.Environ(), "RXE_VM_BUILD="+build, fmt.Sprintf("NS=rxevm-preload%d", os.Getpid()))
			out, err := cmd.CombinedOutput()
			t.Logf("run-peer.sh:\n%s", lastLines(string(out), 60))
			if err != nil {
				t.Fatalf("run-peer.sh: %v", err)
			}
			for _, p := range progs {
				if !regexp.MustCompile(p.want).MatchString(string(out)) {
					t.Errorf("%s %s: no %q in the output", p.name, p.client, p.want)
				}
			}
			logFigures(t, name, string(out))
			checkWire(t, filepath.Join(build, "captures", "peer-preload-"+name+".pcap"))
		})
	}
}

// logFigures logs the result lines of ib_write_bw (with and without -R)
// and ib_send_lat in a boot's output, each once, for docs/c-programs.md's
// table: both sides print them (a write_bw server prints its client's
// figures; each side of send_lat measures its own round trips).
func logFigures(t *testing.T, boot, out string) {
	seen := map[string]bool{}
	for _, re := range []string{`(?m)^\s*65536\s+20\s.*$`, `(?m)^\s*2\s+20\s.*$`} {
		for _, l := range regexp.MustCompile(re).FindAllString(out, -1) {
			l = strings.Join(strings.Fields(l), " ")
			if !seen[l] {
				seen[l] = true
				t.Logf("%s: result: %s", boot, l)
			}
		}
	}
}

// checkWire runs the independent wire checker on a capture.
func checkWire(t *testing.T, pcap string) {
	if _, err := os.Stat(pcap); err != nil {
		t.Errorf("no capture: %v", err)
		return
	}
	checker := os.Getenv("GOROCE_WIRE_CHECK")
	if checker == "" {
		testenv.Skip(t, testenv.WireCheck, "GOROCE_WIRE_CHECK (path of wire-check's check-pcap.sh) is not set")
	}
	out, err := testenv.WireCheckCommand(t, checker, "--pmtu", "1024", pcap).CombinedOutput()
	t.Logf("check-pcap.sh %s: %s", filepath.Base(pcap), lastLines(string(out), 2))
	if err == nil {
		return
	}
	// Only a UDP checksum left for offload (captured on the sending side
	// before it is filled in) may be flagged; any other reason fails.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "!!") && !strings.Contains(strings.ToLower(line), "udp checksum") {
			t.Errorf("check-pcap.sh: %s", line)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
