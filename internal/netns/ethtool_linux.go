//go:build linux

package netns

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetFeatures turns the named offload features (as ethtool -k lists them:
// "rx-gro", "tx-udp-segmentation") of the device dev in ns on or off, as
// `ethtool -K dev rx-gro on` does, with the SIOCETHTOOL ioctl (the ethtool
// program need not be installed). Turning GRO on gives a veth NAPI, which
// UDP GRO needs.
func (ns *NS) SetFeatures(dev string, features map[string]bool) error {
	return ns.Do(func() error { return ethtoolSet(dev, features) })
}

// ifreqData is struct ifreq with ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

func ethtool(fd int, dev string, data unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.name[:], dev)
	ifr.data = data
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}

const (
	ethSSFeatures = 4  // ETH_SS_FEATURES
	ethGStringLen = 32 // ETH_GSTRING_LEN
)

func ethtoolSet(dev string, features map[string]bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// struct ethtool_sset_info: cmd, reserved, sset_mask (u64), data[1].
	info := make([]byte, 4+4+8+4)
	binary.NativeEndian.PutUint32(info, unix.ETHTOOL_GSSET_INFO)
	binary.NativeEndian.PutUint64(info[8:], 1<<ethSSFeatures)
	if err := ethtool(fd, dev, unsafe.Pointer(&info[0])); err != nil {
		return fmt.Errorf("ETHTOOL_GSSET_INFO: %w", err)
	}
	n := int(binary.NativeEndian.Uint32(info[16:]))
	// struct ethtool_gstrings: cmd, string_set, len, data[len * 32].
	strs := make([]byte, 12+n*ethGStringLen)
	binary.NativeEndian.PutUint32(strs, unix.ETHTOOL_GSTRINGS)
	binary.NativeEndian.PutUint32(strs[4:], ethSSFeatures)
	binary.NativeEndian.PutUint32(strs[8:], uint32(n))
	if err := ethtool(fd, dev, unsafe.Pointer(&strs[0])); err != nil {
		return fmt.Errorf("ETHTOOL_GSTRINGS: %w", err)
	}
	blocks := (n + 31) / 32
	// struct ethtool_sfeatures: cmd, size, then {valid, requested} per 32 features.
	set := make([]byte, 8+8*blocks)
	binary.NativeEndian.PutUint32(set, unix.ETHTOOL_SFEATURES)
	binary.NativeEndian.PutUint32(set[4:], uint32(blocks))
	found := 0
	for i := range n {
		name := string(bytes.TrimRight(strs[12+i*ethGStringLen:12+(i+1)*ethGStringLen], "\x00"))
		on, ok := features[name]
		if !ok {
			continue
		}
		found++
		b := set[8+8*(i/32):]
		binary.NativeEndian.PutUint32(b, binary.NativeEndian.Uint32(b)|1<<(i%32))
		if on {
			binary.NativeEndian.PutUint32(b[4:], binary.NativeEndian.Uint32(b[4:])|1<<(i%32))
		}
	}
	if found != len(features) {
		return fmt.Errorf("%d of the features %v unknown", len(features)-found, features)
	}
	if err := ethtool(fd, dev, unsafe.Pointer(&set[0])); err != nil {
		return fmt.Errorf("ETHTOOL_SFEATURES: %w", err)
	}
	return nil
}
