package netns

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// add creates namespace name; exists reports that the name was taken.
func add(name string) (exists bool, err error) {
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err == nil {
		return false, nil
	}
	if bytes.Contains(out, []byte("File exists")) {
		return true, nil
	}
	if bytes.Contains(out, []byte("not permitted")) || bytes.Contains(out, []byte("Permission denied")) {
		err = fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return false, fmt.Errorf("netns: ip netns add %s: %w: %s", name, err, bytes.TrimSpace(out))
}

// claim creates two namespaces named after the first free number n.
func claim() (a, b *NS, n int, err error) {
	pid := os.Getpid()
	for n = 0; n < 1<<16; n++ {
		base := "goroce-" + strconv.Itoa(pid) + "-" + strconv.Itoa(n)
		exists, err := add(base + "a")
		if err != nil {
			return nil, nil, 0, err
		}
		if exists {
			continue
		}
		exists, err = add(base + "b")
		if err != nil || exists {
			ip("netns", "del", base+"a")
			if err != nil {
				return nil, nil, 0, err
			}
			continue
		}
		return &NS{Name: base + "a"}, &NS{Name: base + "b"}, n, nil
	}
	return nil, nil, 0, errors.New("netns: no free namespace name")
}

// New creates one namespace with loopback up, deleted at the end of the
// test. It skips the test when namespaces cannot be created.
func New(t testing.TB) *NS {
	t.Helper()
	Require(t)
	a, b, _, err := claim()
	if err != nil {
		skipOrFatal(t, err)
	}
	ip("netns", "del", b.Name)
	t.Cleanup(func() { a.delete(t) })
	if err := ip("-n", a.Name, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	return a
}

// NewPair creates two namespaces joined by a veth link (LinkName at both
// ends) with addresses from opts.Prefix, the MTU, loopback up and permanent
// neighbour entries for each other (no ARP on the first packets). They are
// deleted at the end of the test. It skips the test when namespaces cannot
// be created.
func NewPair(t testing.TB, opts Options) *Pair {
	t.Helper()
	Require(t)
	if opts.MTU <= 0 {
		opts.MTU = DefaultMTU
	}
	if opts.Prefix.IsValid() && (!opts.Prefix.Addr().Is4() || opts.Prefix.Bits() > 30) {
		t.Fatalf("netns: prefix %v: want an IPv4 subnet of at most /30", opts.Prefix)
	}
	a, b, n, err := claim()
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() { a.delete(t); b.delete(t) })
	prefix := opts.Prefix.Masked()
	if !opts.Prefix.IsValid() {
		prefix = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 0}), 24)
	}
	p := &Pair{
		A: a, B: b,
		AddrA:  prefix.Addr().Next(),
		AddrB:  prefix.Addr().Next().Next(),
		MACA:   net.HardwareAddr{0x02, 0x77, byte(n >> 8), byte(n), 0, 1},
		MACB:   net.HardwareAddr{0x02, 0x77, byte(n >> 8), byte(n), 0, 2},
		Prefix: prefix,
		MTU:    opts.MTU,
	}
	mtu := strconv.Itoa(opts.MTU)
	cmds := [][]string{
		{"link", "add", "name", LinkName, "netns", a.Name, "address", p.MACA.String(), "mtu", mtu,
			"type", "veth", "peer", "name", LinkName, "netns", b.Name, "address", p.MACB.String(), "mtu", mtu},
	}
	for _, end := range []struct {
		ns         *NS
		addr, peer netip.Addr
		peerMAC    net.HardwareAddr
	}{{a, p.AddrA, p.AddrB, p.MACB}, {b, p.AddrB, p.AddrA, p.MACA}} {
		cmds = append(cmds,
			[]string{"-n", end.ns.Name, "addr", "add", netip.PrefixFrom(end.addr, prefix.Bits()).String(), "dev", LinkName},
			[]string{"-n", end.ns.Name, "link", "set", LinkName, "up"},
			[]string{"-n", end.ns.Name, "link", "set", "lo", "up"},
			[]string{"-n", end.ns.Name, "neigh", "replace", end.peer.String(), "lladdr", end.peerMAC.String(), "dev", LinkName, "nud", "permanent"},
		)
	}
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNotSupported) {
		testenv.Skip(t, testenv.Netns, err)
	}
	t.Fatal(err)
}

func (ns *NS) delete(t testing.TB) {
	if err := ip("netns", "del", ns.Name); err != nil {
		t.Errorf("netns: cleanup: %v", err)
	}
}

// Do runs f on an OS thread switched into the namespace, so that sockets f
// opens belong to it (they stay there after Do returns), and returns f's
// error. Goroutines f starts run outside the namespace. f must not call
// t.Fatal or t.Skip (it runs on another goroutine); a panic in f is
// re-raised in the caller.
func (ns *NS) Do(f func() error) error {
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		// The thread stays locked, and so is discarded when this goroutine
		// ends, unless it returns to its original namespace.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: fmt.Errorf("netns: %w", err)}
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns.Name)
		if err != nil {
			done <- result{err: fmt.Errorf("netns: %w", err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("netns: setns %s: %w", ns.Name, err)}
			return
		}
		var r result
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panicked, r.value = true, v
				}
			}()
			r.err = f()
		}()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		done <- r
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}

// Exec runs a command inside the namespace (ip netns exec) and returns its
// combined output; the error includes the output.
func (ns *NS) Exec(args ...string) ([]byte, error) {
	return ns.execInput(nil, args...)
}

func (ns *NS) execInput(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("netns: %s: %s: %w: %s", ns.Name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// lossTable is the nftables table SetLoss uses for device dev.
func lossTable(dev string) string {
	return "goroce_loss_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, dev)
}

// SetLoss drops, at random, percent % of the UDP datagrams (IPv4 or IPv6)
// arriving on device dev of the namespace (an nftables netdev ingress rule,
// numgen random mod 100), replacing an earlier setting; 0 removes the rule.
// Other traffic (ARP, ICMP, neighbour discovery) passes, so that only the
// packets under test are counted. It needs the nft
// command (see RequireTool) and returns an error matching ErrNotSupported
// without it.
func (ns *NS) SetLoss(dev string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("netns: loss %d%% out of range", percent)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("netns: set loss: nft: %w", ErrNotSupported)
	}
	table := lossTable(dev)
	script := "add table netdev " + table + "\ndelete table netdev " + table + "\n"
	if percent > 0 {
		match := fmt.Sprintf("meta l4proto udp numgen random mod 100 < %d ", percent)
		if percent == 100 {
			match = "meta l4proto udp " // nft refuses "< 100" for a value mod 100
		}
		script += fmt.Sprintf("table netdev %s {\n\tchain ingress {\n\t\ttype filter hook ingress device %q priority 0; policy accept;\n\t\t%scounter drop\n\t}\n}\n", table, dev, match)
	}
	_, err := ns.execInput([]byte(script), "nft", "-f", "-")
	return err
}

// LossDropped returns how many datagrams SetLoss's rule on dev has dropped.
func (ns *NS) LossDropped(dev string) (uint64, error) {
	out, err := ns.Exec("nft", "list", "table", "netdev", lossTable(dev))
	if err != nil {
		return 0, err
	}
	const key = "counter packets "
	i := bytes.Index(out, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("netns: no loss counter in: %s", out)
	}
	num := out[i+len(key):]
	if j := bytes.IndexByte(num, ' '); j >= 0 {
		num = num[:j]
	}
	return strconv.ParseUint(string(num), 10, 64)
}
