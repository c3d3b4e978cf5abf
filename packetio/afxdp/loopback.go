package afxdp

// loopback carries the packets a Conn sends to its own address: they never
// reach the interface (the kernel routes them through lo, which AF_XDP does
// not see), so Transmit copies them into this ring and Receive returns them,
// as rdma_rxe loops back packets for a local destination.
//
// Slots [tail, head) wait to be received; [held, tail) were returned by the
// last Receive and stay valid until the next. It is used by the driver
// goroutine only, and its memory is allocated on first use.
type loopback struct {
	mem              []byte
	lens             []int
	ports            []uint16 // each packet's UDP source port
	slots, size      int
	head, tail, held int
}

// push copies p, sent from UDP port port, into a free slot; false when
// every slot is in use.
func (l *loopback) push(p []byte, port uint16) bool {
	if l.mem == nil {
		l.mem = make([]byte, l.slots*l.size)
		l.lens = make([]int, l.slots)
		l.ports = make([]uint16, l.slots)
	}
	if l.head-l.held == l.slots || len(p) > l.size {
		return false
	}
	i := l.head % l.slots
	l.lens[i] = copy(l.mem[i*l.size:(i+1)*l.size], p)
	l.ports[i] = port
	l.head++
	return true
}

// release ends the validity of the packets the last take returned.
func (l *loopback) release() { l.held = l.tail }

// pending returns how many packets wait.
func (l *loopback) pending() int { return l.head - l.tail }

// take returns the next waiting packet and its source port; call it at
// most pending times.
func (l *loopback) take() ([]byte, uint16) {
	i := l.tail % l.slots
	l.tail++
	return l.mem[i*l.size : i*l.size+l.lens[i] : i*l.size+l.lens[i]], l.ports[i]
}
