package uring_test

import (
	"testing"

	"github.com/goroce/goroce/internal/leakcheck"
	"github.com/goroce/goroce/packetio/uring"
)

// TestMain fails the package's tests when they leave a goroutine or a file
// descriptor behind.
func TestMain(m *testing.M) { leakcheck.Main(m) }

// noGSO returns the options of the tests that send arbitrary payloads
// rather than RoCEv2 packets whose last four bytes are their ICRC for IPv4
// Identification 0: with GSO, Transmit rewrites those bytes in every
// packet after the first of a message (gso_test.go covers GSO).
func noGSO() uring.Options { return uring.Options{GSO: uring.OffloadOff} }
