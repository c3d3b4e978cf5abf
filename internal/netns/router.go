package netns

import "net/netip"

// RouterOptions configures NewRouter. The zero value gives the defaults.
type RouterOptions struct {
	// Hosts is the number of host namespaces (1 to 200). Default 4.
	Hosts int
	// Prefix is an IPv4 /16 from which host i's link takes the /24 number
	// i: the router gets its first host address (.1), host i the second
	// (.2). Default 10.99.0.0/16 (each topology is its own network, so
	// topologies of parallel tests may share addresses).
	Prefix netip.Prefix
	// MTU of every veth end. Default DefaultMTU.
	MTU int
}

// Router is a star of host namespaces around a router namespace: host i
// has one veth link (LinkName in the host) to the router (RouterLinks[i]
// there), its own subnet, and a default route through the router, which
// forwards IPv4 (net.ipv4.ip_forward=1). Every neighbour entry is permanent,
// so no ARP runs. Faults go in the router (nftables on its forward hook see
// every packet between hosts).
type Router struct {
	// Router is the router's namespace, Hosts the hosts' namespaces.
	Router *NS
	Hosts  []*NS
	// HostAddrs[i] is host i's address; RouterAddrs[i] the router's
	// address on host i's link, which is host i's gateway.
	HostAddrs   []netip.Addr
	RouterAddrs []netip.Addr
	// RouterLinks[i] is the name of host i's link in the router's
	// namespace ("h0", "h1", ...).
	RouterLinks []string
	// Prefixes[i] is host i's link subnet.
	Prefixes []netip.Prefix
	// MTU is the MTU of every link.
	MTU int
}
