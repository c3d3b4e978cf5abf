//go:build !linux

package netns

// Backlog is not supported off Linux.
type Backlog struct{}

// Backlog returns an error matching ErrNotSupported.
func (ns *NS) Backlog(dev string) (*Backlog, error) { return nil, ErrNotSupported }

// Read returns an error matching ErrNotSupported.
func (b *Backlog) Read() (bytes, packets uint32, err error) { return 0, 0, ErrNotSupported }

// Close does nothing.
func (b *Backlog) Close() {}
