// Package preload runs unmodified C and C++ RDMA programs on goroce's soft
// devices: libgoroce-verbs.so (built from ./libgoroceverbs with Go's
// c-shared build mode) defines libibverbs' exported functions and is put in
// front of libibverbs with LD_PRELOAD, so that ibv_get_device_list lists
// the soft devices the environment describes and every verb the program
// calls is served by the soft engine, in the program's own process.
//
// Why LD_PRELOAD and not a libibverbs provider: rdma-core 44 finds devices
// through the kernel (netlink and /sys/class/infiniband_verbs) and a
// provider is loaded only for a uverbs device the kernel lists, whose
// character device ibv_open_device then opens; with no kernel module there
// is nothing for a provider to match. Interposing the exported functions
// needs neither a kernel device nor a fake sysfs.
//
// This package holds what launchers need: the environment variables the
// library reads, where to find it and how to build it. goroce run uses it.
package preload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The environment the library reads.
const (
	// EnvAddr lists the devices' addresses, separated by commas: one soft
	// device per address (default: the first non-loopback IPv4 address
	// of an interface that is up).
	EnvAddr = "GOROCE_ADDR"
	// EnvPath names the packet path: udp, uring, afxdp or auto (default).
	EnvPath = "GOROCE_PATH"
	// EnvDevice lists the devices' names (default soft0, soft1, ...).
	EnvDevice = "GOROCE_DEVICE"
	// EnvPcap is a capture file of every packet the devices send and
	// receive (with several devices, each device's name is added before
	// the extension).
	EnvPcap = "GOROCE_PCAP"
	// EnvLib is where launchers find the library (goroce run's --lib).
	EnvLib = "GOROCE_VERBS_LIB"
)

// LibName is the library's file name.
const LibName = "libgoroce-verbs.so"

// Package is the import path of the library's main package.
const Package = "github.com/goroce/goroce/preload/libgoroceverbs"

// BuildArgs are the go command's arguments that build the library into out
// (cgo and libibverbs' headers, libibverbs-dev, are needed).
func BuildArgs(out string) []string {
	return []string{"build", "-tags", "ibverbs", "-buildmode=c-shared", "-o", out, Package}
}

// ErrNotFound says that the library is nowhere Find looks.
var ErrNotFound = errors.New("preload: " + LibName + " not found")

// Find returns the library's path: $GOROCE_VERBS_LIB, else LibName beside
// the running executable or in ../lib beside it.
func Find() (string, error) {
	if p := os.Getenv(EnvLib); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("preload: %s=%s: %w", EnvLib, p, err)
		}
		return filepath.Abs(p)
	}
	exe, err := os.Executable()
	if err == nil {
		dir := filepath.Dir(exe)
		for _, p := range []string{filepath.Join(dir, LibName), filepath.Join(dir, "..", "lib", LibName)} {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w (set %s, or build it: go %v)", ErrNotFound, EnvLib, BuildArgs(LibName))
}

// Options describe the devices a program gets.
type Options struct {
	Addrs []string // one device per address ("" for the default)
	Path  string
	Names []string
	Pcap  string
	Lib   string // the library, put first in LD_PRELOAD
}

// Env returns env with the variables that give a program the devices of o,
// the library first in LD_PRELOAD.
func Env(env []string, o Options) []string {
	set := func(k, v string) {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	preload := o.Lib
	for _, kv := range env {
		if len(kv) > len("LD_PRELOAD=") && kv[:len("LD_PRELOAD=")] == "LD_PRELOAD=" {
			preload += " " + kv[len("LD_PRELOAD="):]
		}
	}
	set("LD_PRELOAD", preload)
	set(EnvAddr, join(o.Addrs))
	set(EnvPath, o.Path)
	set(EnvDevice, join(o.Names))
	set(EnvPcap, o.Pcap)
	return env
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}
