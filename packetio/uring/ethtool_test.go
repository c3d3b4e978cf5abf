//go:build linux

package uring_test

import (
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// setFeatures turns the named offload features of the veth in ns on or
// off (netns.NS.SetFeatures), failing the test if it cannot.
func setFeatures(t testing.TB, ns *netns.NS, features map[string]bool) {
	t.Helper()
	if err := ns.SetFeatures(netns.LinkName, features); err != nil {
		t.Fatalf("ethtool -K %s %v: %v", netns.LinkName, features, err)
	}
}
