package engine

import "github.com/goroce/goroce/verbs"

// gather copies the bytes [off, off+len(dst)) of the WQE in slot i of the
// send queue into dst.
func (qp *QP) gather(i uint64, off uint32, dst []byte) bool {
	q := qp.sq
	s := &q.slots[i&q.mask]
	if s.wr.Flags&verbs.SendInline != 0 {
		in := q.inlineOf(i)[:s.length]
		if int(off)+len(dst) > len(in) {
			return false
		}
		copy(dst, in[off:])
		return true
	}
	for _, g := range s.wr.SGList {
		if len(dst) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		b := sgeBytes(qp.e.MRs.lookup(g.LKey), qp.pd, g, off)
		if b == nil {
			return false
		}
		c := copy(dst, b)
		dst = dst[c:]
		off = 0
	}
	return len(dst) == 0
}

// scatter copies src into the SGEs from byte off, requiring LOCAL_WRITE.
func (qp *QP) scatter(sges []verbs.SGE, pd uint32, off uint32, src []byte) bool {
	for _, g := range sges {
		if len(src) == 0 {
			break
		}
		if off >= g.Length {
			off -= g.Length
			continue
		}
		m := qp.e.MRs.lookup(g.LKey)
		if m == nil || m.access&verbs.AccessLocalWrite == 0 {
			return false
		}
		b := sgeBytes(m, pd, g, off)
		if b == nil {
			return false
		}
		c := copy(b, src)
		src = src[c:]
		off = 0
	}
	return len(src) == 0
}

// sgeBytes returns the bytes of SGE g from offset off, if g lies in region m
// of protection domain pd.
func sgeBytes(m *MR, pd uint32, g verbs.SGE, off uint32) []byte {
	if m == nil || m.pd != pd || g.Addr < m.addr {
		return nil
	}
	o := g.Addr - m.addr
	if o > uint64(len(m.buf)) || uint64(g.Length) > uint64(len(m.buf))-o || off > g.Length {
		return nil
	}
	return m.buf[o+uint64(off) : o+uint64(g.Length)]
}
