//go:build linux

package afxdp

import "golang.org/x/sys/unix"

// producer is the user-space producer side of a ring: the fill ring (frame
// addresses, uint64) and the TX ring (unix.XDPDesc). The kernel consumes.
//
// Use: Reserve(n) slots, write them with Set (or Desc), Submit the lot with
// one store of the producer index.
type producer[D uint64 | unix.XDPDesc] struct {
	ring
	descs      []D
	cachedProd uint32 // next slot to reserve; published by Submit
	cachedCons uint32 // the kernel's consumer index, as last read
}

func newProducer[D uint64 | unix.XDPDesc](mem []byte, off unix.XDPRingOffset, size uint32) producer[D] {
	q := producer[D]{ring: newRing(mem, off, size), descs: descs[D](mem, off, size)}
	q.cachedProd = q.producer.Load()
	q.cachedCons = q.consumer.Load()
	return q
}

// free returns how many slots can be reserved, reading the kernel's
// consumer index only when the cached one leaves fewer than want.
func (q *producer[D]) free(want uint32) uint32 {
	n := q.size - (q.cachedProd - q.cachedCons)
	if n >= want {
		return n
	}
	q.cachedCons = q.consumer.Load() // acquire: the kernel is done with those slots
	return q.size - (q.cachedProd - q.cachedCons)
}

// Reserve reserves up to n slots and returns the index of the first and how
// many were reserved (fewer when the ring is fuller than that).
func (q *producer[D]) Reserve(n uint32) (start, got uint32) {
	got = min(n, q.free(n))
	start = q.cachedProd
	q.cachedProd += got
	return start, got
}

// Cancel gives back the last n reserved and not yet submitted slots.
func (q *producer[D]) Cancel(n uint32) { q.cachedProd -= n }

// Set writes the descriptor of reserved slot i (an index from Reserve, not
// masked).
func (q *producer[D]) Set(i uint32, d D) { q.descs[i&q.mask] = d }

// Submit publishes every reserved slot with one release store of the
// producer index.
func (q *producer[D]) Submit() { q.producer.Store(q.cachedProd) }

// Outstanding returns how many submitted entries the kernel has not consumed
// yet (one acquire load of its consumer index).
func (q *producer[D]) Outstanding() uint32 {
	q.cachedCons = q.consumer.Load()
	return q.producer.Load() - q.cachedCons
}
