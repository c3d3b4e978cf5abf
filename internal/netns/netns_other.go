//go:build !linux

package netns

import (
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// New skips the test: network namespaces are Linux only.
func New(t testing.TB) *NS {
	t.Helper()
	testenv.Skip(t, testenv.Netns, "netns: network namespaces are Linux only")
	return nil
}

// NewPair skips the test: network namespaces are Linux only.
func NewPair(t testing.TB, opts Options) *Pair {
	t.Helper()
	testenv.Skip(t, testenv.Netns, "netns: network namespaces are Linux only")
	return nil
}

// Do returns an error matching ErrNotSupported.
func (ns *NS) Do(f func() error) error { return ErrNotSupported }

// Exec returns an error matching ErrNotSupported.
func (ns *NS) Exec(args ...string) ([]byte, error) { return nil, ErrNotSupported }

// SetFeatures returns an error matching ErrNotSupported.
func (ns *NS) SetFeatures(dev string, features map[string]bool) error { return ErrNotSupported }

// SetLoss returns an error matching ErrNotSupported.
func (ns *NS) SetLoss(dev string, percent int) error { return ErrNotSupported }

// LossDropped returns an error matching ErrNotSupported.
func (ns *NS) LossDropped(dev string) (uint64, error) { return 0, ErrNotSupported }
