package wire

import "net/netip"

func addr4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }

func addr6(last byte) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 15: last})
}
