package netns

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Backlog reads the bytes and packets queued in the root qdisc of one
// device of a namespace, over a netlink socket opened in it: a read costs
// one netlink round trip (microseconds), where tc -s qdisc costs a process
// (milliseconds), so a test can sample a bottleneck's queue every
// millisecond while load crosses it. One goroutine at a time.
type Backlog struct {
	h    *netlink.Handle
	link netlink.Link
}

// Backlog opens a reader of device dev's root qdisc queue; Close it.
func (ns *NS) Backlog(dev string) (*Backlog, error) {
	var b Backlog
	err := ns.Do(func() (err error) {
		// The handle's socket stays in the namespace it was opened in.
		if b.h, err = netlink.NewHandle(); err != nil {
			return err
		}
		if b.link, err = b.h.LinkByName(dev); err != nil {
			b.h.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: backlog of %s in %s: %w", dev, ns.Name, err)
	}
	return &b, nil
}

// Read returns the bytes and packets the root qdisc holds now.
func (b *Backlog) Read() (bytes, packets uint32, err error) {
	qs, err := b.h.QdiscList(b.link)
	if err != nil {
		return 0, 0, fmt.Errorf("netns: backlog: %w", err)
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT {
			continue
		}
		if a.Statistics == nil || a.Statistics.Queue == nil {
			return 0, 0, fmt.Errorf("netns: backlog: the root qdisc (%s) reported no queue statistics", q.Type())
		}
		return a.Statistics.Queue.Backlog, a.Statistics.Queue.Qlen, nil
	}
	return 0, 0, fmt.Errorf("netns: backlog: no root qdisc")
}

// Close closes the netlink socket.
func (b *Backlog) Close() { b.h.Close() }
