//go:build !linux

package netns

// SetTBF returns an error matching ErrNotSupported.
func (ns *NS) SetTBF(dev string, rateBits uint64, burst, limit int) error { return ErrNotSupported }

// QdiscStats returns an error matching ErrNotSupported.
func (ns *NS) QdiscStats(dev string) (QdiscStats, error) { return QdiscStats{}, ErrNotSupported }

// SetCEMark returns an error matching ErrNotSupported.
func (ns *NS) SetCEMark(dev string, pps, burst int) error { return ErrNotSupported }

// CEMarked returns an error matching ErrNotSupported.
func (ns *NS) CEMarked(dev string) (uint64, error) { return 0, ErrNotSupported }
