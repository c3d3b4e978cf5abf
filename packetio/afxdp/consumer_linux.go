//go:build linux

package afxdp

import "golang.org/x/sys/unix"

// consumer is the user-space consumer side of a ring: the RX ring
// (unix.XDPDesc) and the completion ring (frame addresses, uint64). The
// kernel produces.
//
// Use: Peek(n) to learn how many entries are ready, read them with Get, then
// Release them with one store of the consumer index.
type consumer[D uint64 | unix.XDPDesc] struct {
	ring
	descs      []D
	cachedProd uint32 // the kernel's producer index, as last read
	cachedCons uint32 // next entry to read; published by Release
}

func newConsumer[D uint64 | unix.XDPDesc](mem []byte, off unix.XDPRingOffset, size uint32) consumer[D] {
	q := consumer[D]{ring: newRing(mem, off, size), descs: descs[D](mem, off, size)}
	q.cachedProd = q.producer.Load()
	q.cachedCons = q.consumer.Load()
	return q
}

// Peek returns the index of the first ready entry and how many are ready, at
// most n, reading the kernel's producer index (an acquire load, after which
// the entries it covers are visible) only when the cached one shows fewer
// than n.
func (q *consumer[D]) Peek(n uint32) (start, got uint32) {
	avail := q.cachedProd - q.cachedCons
	if avail < n {
		q.cachedProd = q.producer.Load()
		avail = q.cachedProd - q.cachedCons
	}
	return q.cachedCons, min(n, avail)
}

// Get returns entry i (an index from Peek, not masked).
func (q *consumer[D]) Get(i uint32) D { return q.descs[i&q.mask] }

// Release hands the next n entries back to the kernel with one release store
// of the consumer index (their contents must have been read).
func (q *consumer[D]) Release(n uint32) {
	if n == 0 {
		return
	}
	q.cachedCons += n
	q.consumer.Store(q.cachedCons)
}
