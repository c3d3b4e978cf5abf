package verbs

// DefaultGIDIndex is the GID index goroce's helpers and tools use when
// given none (index 0 in their options means this one): index 1, where
// soft devices and rdma_rxe on an IPv4 interface keep the IPv4-mapped GID
// (index 0 is the link-local IPv6 GID, which RoCEv2 over IPv4 cannot send
// from). Raw verbs (QueryGID, AHAttr.SGIDIndex) take indexes as given.
const DefaultGIDIndex = 1

// GIDIndexOrDefault returns index, or DefaultGIDIndex for 0.
func GIDIndexOrDefault(index int) int {
	if index == 0 {
		return DefaultGIDIndex
	}
	return index
}
