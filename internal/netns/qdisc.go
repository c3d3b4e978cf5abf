package netns

// QdiscStats is what tc -s qdisc shows for the root qdisc of a device.
type QdiscStats struct {
	// Kind is the qdisc's kind ("tbf", "noqueue", ...).
	Kind string
	// SentBytes and SentPackets count what the qdisc let out.
	SentBytes, SentPackets uint64
	// Dropped counts the packets it dropped (for tbf: its queue was full),
	// Overlimits the times a packet had to wait for tokens.
	Dropped, Overlimits uint64
}
