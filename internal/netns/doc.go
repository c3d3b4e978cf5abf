// Package netns builds throwaway network namespaces for tests: a pair of
// namespaces joined by a veth link, with IPv4 addresses, MTU, static
// neighbour entries and loopback up, deleted when the test ends. Code runs
// inside a namespace with NS.Do (sockets opened there belong to it) and
// commands with NS.Exec. NS.SetLoss installs an nftables rule that drops a
// share of the UDP datagrams arriving on a device, for fault tests.
// NewRouter builds a star instead: host namespaces, each with its own subnet
// and veth link to one router namespace that forwards between them, where
// nftables rules can act on one path between two hosts. NS.SetTBF makes a
// device a shallow bottleneck (tc tbf: a rate and a short queue), and
// NS.SetCEMark has a router mark ECN-capable packets CE above a rate (a
// phantom queue in nftables, for kernels without RED or fq_codel);
// NS.QdiscStats and NS.CEMarked read what they did.
//
// Creating namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the
// ip command of iproute2; SetLoss needs nft. Tests call Require (and
// RequireTool) first, which skip with the reason when these are missing.
//
// Namespaces are named goroce-<pid>-<n><a|b>, n the first number free in
// /run/netns (a router's goroce-<pid>-<n>r and goroce-<pid>-<n>h<i>), so
// parallel tests and processes never share one; the package
// only ever deletes namespaces it created.
package netns
