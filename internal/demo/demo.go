// Package demo is `goroce demo`: two soft RDMA devices in one process, on
// two loopback addresses, performing every kind of work request in turn and
// showing each one's whole life: the work request posted, the RoCEv2 packets
// it produced on the wire (decoded as `goroce decode` decodes them), and the
// completions on both sides with their timing.
package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goroce/goroce/capture"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/packetio/fault"
	"github.com/goroce/goroce/packetio/paths"
	"github.com/goroce/goroce/packetio/tee"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Options configure the demo.
type Options struct {
	A, B    netip.Addr // device addresses (default 127.0.0.1 and 127.0.0.2)
	Port    int        // UDP port (default 4791)
	MTU     verbs.MTU  // path MTU (default 1024)
	Size    int        // message size (default 2500: three packets at MTU 1024)
	Pcap    string     // if set, write every packet to this pcap file
	Out     io.Writer
	NewConn func(local netip.Addr) (packetio.Conn, error) // default: the packet path Path names
	// Path is the packet path when NewConn is nil: udp, uring, afxdp or
	// auto (package packetio/paths; default auto).
	Path    string
	Timeout time.Duration // per step (default 5 s)
	// Faults to inject into every packet sent (both devices): see
	// packetio/fault. Zero: none.
	Faults fault.Options
}

type wirePkt struct {
	t        time.Time
	src, dst netip.Addr
	sport    uint16
	b        []byte
}

// node is one device and its objects.
type node struct {
	name string
	dev  *soft.Device
	ctx  verbs.Context
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	buf  []byte
}

type demo struct {
	o      Options
	w      io.Writer
	mu     sync.Mutex
	pkts   []wirePkt
	t0     time.Time
	a, b   *node
	dec    capture.Decoder
	steps  int
	fails  int
	faults []*fault.Conn
	paths  []string        // the packet path of each device, when Options.Path chose it
	pcap   *tee.PcapWriter // where record writes every packet; nil: no pcap file
}

// Run runs the demo and returns an error if any step did not end as it
// should.
func Run(o Options) error {
	o.defaults()
	d := &demo{o: o, w: o.Out, dec: capture.Decoder{PMTU: o.MTU.Bytes()}}
	if o.NewConn == nil {
		d.o.NewConn = d.openPath
	}
	if o.Pcap != "" {
		f, err := os.Create(o.Pcap)
		if err != nil {
			return err
		}
		defer f.Close()
		if d.pcap, err = tee.NewPcapWriter(f); err != nil {
			return err
		}
	}
	record := d.record
	var err error
	if d.a, err = d.newNode("soft0", o.A, record); err != nil {
		return err
	}
	defer d.a.dev.Close()
	if d.b, err = d.newNode("soft1", o.B, record); err != nil {
		return err
	}
	defer d.b.dev.Close()
	if err := d.connect(); err != nil {
		return err
	}
	d.run()
	d.summary()
	if d.pcap != nil {
		if err := d.pcap.Err(); err != nil {
			return err
		}
		fmt.Fprintf(d.w, "packets written to %s\n", o.Pcap)
	}
	if d.fails > 0 {
		return fmt.Errorf("demo: %d of %d steps did not end as expected", d.fails, d.steps)
	}
	return nil
}

// defaults gives the options left zero their defaults: the two loopback
// addresses, MTU 1024, 2500-byte messages, standard output and 5 s a
// step.
func (o *Options) defaults() {
	if !o.A.IsValid() {
		o.A = netip.MustParseAddr("127.0.0.1")
	}
	if !o.B.IsValid() {
		o.B = netip.MustParseAddr("127.0.0.2")
	}
	if o.MTU == 0 {
		o.MTU = verbs.MTU1024
	}
	if o.Size <= 0 {
		o.Size = 2500
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
}

// openPath opens the packet path Options.Path names on local, the default
// of Options.NewConn, and remembers which path it chose for connect to
// show.
func (d *demo) openPath(local netip.Addr) (packetio.Conn, error) {
	c, ch, err := paths.Open(local, d.o.Path, paths.Options{Port: d.o.Port})
	if err == nil {
		d.paths = append(d.paths, ch.String())
	}
	return c, err
}

// record is the tee of both devices: it writes every packet to the pcap
// file, if there is one, and keeps a copy of each packet sent for the
// current step to show.
func (d *demo) record(t time.Time, dir tee.Dir, src, dst netip.Addr, sport uint16, b []byte) {
	if d.pcap != nil {
		d.pcap.Write(t, dir, src, dst, sport, b)
	}
	if dir == tee.Out {
		d.mu.Lock()
		d.pkts = append(d.pkts, wirePkt{t, src, dst, sport, append([]byte(nil), b...)})
		d.mu.Unlock()
	}
}

// summary prints the count of steps and of those that failed, each
// device's counters, and what the fault injectors did, if any.
func (d *demo) summary() {
	fmt.Fprintf(d.w, "\n%d steps, %d did not end as expected.\n", d.steps, d.fails)
	for _, n := range []*node{d.a, d.b} {
		s := n.dev.Stats()
		fmt.Fprintf(d.w, "%s: sent %d packets (%d retransmitted), received %d; NAKs sent %d received %d; RNR NAKs sent %d received %d; drops: ICRC %d, malformed %d, unknown QP %d\n",
			n.name, s.TxPackets, s.Retransmits, s.RxPackets, s.NAKsSent, s.NAKsReceived, s.RNRSent, s.RNRReceived, s.ICRCDrops, s.MalformedDrops, s.UnknownQPDrops)
	}
	for i, fc := range d.faults {
		fs := fc.FaultStats()
		fmt.Fprintf(d.w, "faults injected into soft%d's packets: %d sent, %d dropped, %d duplicated, %d reordered, %d corrupted\n",
			i, fs.Sent, fs.Dropped, fs.Duplicated, fs.Reordered, fs.Corrupted)
	}
}

func (d *demo) newNode(name string, addr netip.Addr, f tee.Func) (*node, error) {
	c, err := d.o.NewConn(addr)
	if err != nil {
		return nil, fmt.Errorf("demo: %s on %v: %w", name, addr, err)
	}
	var conn packetio.Conn = tee.New(c, f)
	if fo := d.o.Faults; fo.Drop > 0 || fo.Duplicate > 0 || fo.Reorder > 0 || fo.Corrupt > 0 {
		fo.Seed += uint64(len(d.faults))
		fc := fault.New(conn, fo)
		d.faults = append(d.faults, fc)
		conn = fc
	}
	dev, err := soft.New(soft.Options{Name: name, Conn: conn})
	if err != nil {
		c.Close()
		return nil, err
	}
	n := &node{name: name, dev: dev, buf: make([]byte, 1<<16)}
	if n.ctx, err = dev.Open(); err != nil {
		return nil, err
	}
	if n.pd, err = n.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if n.cq, err = n.ctx.CreateCQ(64, nil); err != nil {
		return nil, err
	}
	n.mr, err = n.pd.RegMR(n.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		return nil, err
	}
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return n, err
}

// connect brings both QPs to RTS, each aimed at the other, as an
// out-of-band exchange of QPN, PSN and GID would.
func (d *demo) connect() error {
	fmt.Fprintf(d.w, "goroce demo: two soft RoCEv2 devices in this process, talking over UDP port %d\n", wire.RoCEv2Port)
	switch {
	case len(d.paths) == 2 && d.paths[0] == d.paths[1]:
		fmt.Fprintf(d.w, "  packet path: %s\n", d.paths[0])
	case len(d.paths) == 2:
		fmt.Fprintf(d.w, "  packet paths: %s | %s\n", d.paths[0], d.paths[1])
	}
	for _, n := range []*node{d.a, d.b} {
		fmt.Fprintf(d.w, "  %s  %v  GID %v  QP %#06x  MR addr %#x len %d lkey/rkey %#x\n",
			n.name, n.dev.Addr(), n.dev.GID(), n.qp.Num(), n.mr.Addr(), len(n.buf), n.mr.LKey())
	}
	for _, p := range [2][2]*node{{d.a, d.b}, {d.b, d.a}} {
		x, y := p[0], p[1]
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
				verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, PathMTU: d.o.MTU, DestQPN: y.qp.Num(), RQPSN: 0x1000, MaxDestRdAtomic: 1, MinRNRTimer: 12,
				AHAttr: verbs.AHAttr{DGID: y.dev.GID(), SGIDIndex: verbs.DefaultGIDIndex, PortNum: 1}},
				verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x1000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := x.qp.Modify(&s.a, s.m); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(d.w, "  both QPs RESET -> INIT -> RTR -> RTS (RC, path MTU %d, PSNs start at 0x1000)\n", d.o.MTU.Bytes())
	return nil
}

func (d *demo) sge(n *node, off, length int) []verbs.SGE {
	return []verbs.SGE{{Addr: n.mr.Addr() + uint64(off), Length: uint32(length), LKey: n.mr.LKey()}}
}

func (d *demo) run() {
	a, b := d.a, d.b
	size := d.o.Size
	msg := []byte("hello from goroce! ")
	for i := 0; i < size; i++ {
		a.buf[i] = msg[i%len(msg)]
	}
	remote := b.mr.Addr() + 8192

	d.step("SEND / RECV", func() {
		d.postRecv(b, verbs.RecvWR{WRID: 0xB1, SGList: d.sge(b, 0, 8192)})
		d.postSend(a, verbs.SendWR{WRID: 0xA1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendSolicited, SGList: d.sge(a, 0, size)})
	}, []want{{a, 0xA1, verbs.WCSuccess}, {b, 0xB1, verbs.WCSuccess}}, func() error {
		return same("receive buffer", b.buf[:size], a.buf[:size])
	})
	d.step("RDMA WRITE", func() {
		d.postSend(a, verbs.SendWR{WRID: 0xA2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: d.sge(a, 0, size), RemoteAddr: remote, RKey: b.mr.RKey()})
	}, []want{{a, 0xA2, verbs.WCSuccess}}, func() error {
		return same("remote memory", b.buf[8192:8192+size], a.buf[:size])
	})
	d.step("RDMA READ", func() {
		d.postSend(a, verbs.SendWR{WRID: 0xA3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: d.sge(a, 16384, size), RemoteAddr: remote, RKey: b.mr.RKey()})
	}, []want{{a, 0xA3, verbs.WCSuccess}}, func() error {
		return same("read buffer", a.buf[16384:16384+size], b.buf[8192:8192+size])
	})
	word := b.mr.Addr() + 32768
	d.step("ATOMIC COMPARE-SWAP (0 -> 42)", func() {
		d.postSend(a, verbs.SendWR{WRID: 0xA4, Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled, SGList: d.sge(a, 32768, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 0, Swap: 42})
	}, []want{{a, 0xA4, verbs.WCSuccess}}, func() error {
		return d.word(b, 32768, 42, "remote word")
	})
	d.step("ATOMIC FETCH-ADD (+8)", func() {
		d.postSend(a, verbs.SendWR{WRID: 0xA5, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: d.sge(a, 32776, 8), RemoteAddr: word, RKey: b.mr.RKey(), CompareAdd: 8})
	}, []want{{a, 0xA5, verbs.WCSuccess}}, func() error {
		if err := d.word(a, 32776, 42, "fetched value"); err != nil {
			return err
		}
		return d.word(b, 32768, 50, "remote word")
	})
	d.step("RDMA WRITE WITH IMMEDIATE", func() {
		d.postRecv(b, verbs.RecvWR{WRID: 0xB2})
		d.postSend(a, verbs.SendWR{WRID: 0xA6, Opcode: verbs.WRRDMAWriteWithImm, Imm: 0x1234abcd, Flags: verbs.SendSignaled, SGList: d.sge(a, 0, 64), RemoteAddr: remote, RKey: b.mr.RKey()})
	}, []want{{a, 0xA6, verbs.WCSuccess}, {b, 0xB2, verbs.WCSuccess}}, nil)
	d.step("RDMA WRITE with a wrong rkey (a deliberate error)", func() {
		d.postSend(a, verbs.SendWR{WRID: 0xA7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: d.sge(a, 0, 64), RemoteAddr: remote, RKey: b.mr.RKey() ^ 0xFF00})
	}, []want{{a, 0xA7, verbs.WCRemAccessErr}}, func() error {
		attr, _ := a.qp.Query()
		if attr.State != verbs.QPSErr {
			return fmt.Errorf("requester QP is %v, want ERR", attr.State)
		}
		fmt.Fprintf(d.w, "  requester QP is now %v, as IBA requires after a remote access error\n", attr.State)
		return nil
	})
}

type want struct {
	n      *node
	wrid   uint64
	status verbs.WCStatus
}

func (d *demo) postSend(n *node, wr verbs.SendWR) {
	desc := fmt.Sprintf("%s post_send  wr_id=%#x opcode=%v flags=%s", n.name, wr.WRID, wr.Opcode, flagNames(wr.Flags))
	for _, g := range wr.SGList {
		desc += fmt.Sprintf(" sge[addr=%#x len=%d lkey=%#x]", g.Addr, g.Length, g.LKey)
	}
	switch wr.Opcode {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead:
		desc += fmt.Sprintf(" remote_addr=%#x rkey=%#x", wr.RemoteAddr, wr.RKey)
	case verbs.WRAtomicCmpAndSwp:
		desc += fmt.Sprintf(" remote_addr=%#x rkey=%#x compare=%d swap=%d", wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap)
	case verbs.WRAtomicFetchAndAdd:
		desc += fmt.Sprintf(" remote_addr=%#x rkey=%#x add=%d", wr.RemoteAddr, wr.RKey, wr.CompareAdd)
	}
	if wr.Opcode == verbs.WRRDMAWriteWithImm || wr.Opcode == verbs.WRSendWithImm {
		desc += fmt.Sprintf(" imm=%#x", wr.Imm)
	}
	fmt.Fprintf(d.w, "  %s\n", desc)
	if _, err := n.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		fmt.Fprintf(d.w, "  post_send failed: %v\n", err)
	}
}

func (d *demo) postRecv(n *node, wr verbs.RecvWR) {
	desc := fmt.Sprintf("%s post_recv  wr_id=%#x", n.name, wr.WRID)
	for _, g := range wr.SGList {
		desc += fmt.Sprintf(" sge[addr=%#x len=%d lkey=%#x]", g.Addr, g.Length, g.LKey)
	}
	fmt.Fprintf(d.w, "  %s\n", desc)
	if _, err := n.qp.PostRecv([]verbs.RecvWR{wr}); err != nil {
		fmt.Fprintf(d.w, "  post_recv failed: %v\n", err)
	}
}

func flagNames(f verbs.SendFlags) string {
	var s []string
	for _, x := range []struct {
		f verbs.SendFlags
		n string
	}{{verbs.SendSignaled, "SIGNALED"}, {verbs.SendSolicited, "SOLICITED"}, {verbs.SendFence, "FENCE"}, {verbs.SendInline, "INLINE"}} {
		if f&x.f != 0 {
			s = append(s, x.n)
		}
	}
	if len(s) == 0 {
		return "0"
	}
	return strings.Join(s, "|")
}

// step runs one operation: post, then wait for the completions, showing the
// packets and completions as they come.
func (d *demo) step(title string, post func(), wants []want, check func() error) {
	d.steps++
	fmt.Fprintf(d.w, "\n=== %d. %s ===\n", d.steps, title)
	d.mu.Lock()
	d.pkts = d.pkts[:0]
	d.mu.Unlock()
	d.t0 = time.Now()
	post()
	ok := true
	got := make([]bool, len(wants))
	wc := make([]verbs.WC, 8)
	deadline := time.Now().Add(d.o.Timeout)
	var cqes []string
	for remaining := len(wants); remaining > 0; {
		progressed := false
		for _, n := range []*node{d.a, d.b} {
			k := n.cq.Poll(wc)
			for _, w := range wc[:k] {
				progressed = true
				cqes = append(cqes, fmt.Sprintf("%s CQE  +%-8s wr_id=%#x status=%v opcode=%v byte_len=%d qp_num=%#x%s",
					n.name, us(time.Since(d.t0)), w.WRID, w.Status, w.Opcode, w.ByteLen, w.QPNum, wcExtra(&w)))
				for i, x := range wants {
					if x.n == n && x.wrid == w.WRID && !got[i] {
						got[i] = true
						remaining--
						if w.Status != x.status {
							ok = false
							cqes = append(cqes, fmt.Sprintf("  !! expected status %v", x.status))
						}
					}
				}
			}
		}
		if !progressed {
			if time.Now().After(deadline) {
				ok = false
				cqes = append(cqes, fmt.Sprintf("!! timed out waiting for %d completion(s)", remaining))
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	time.Sleep(2 * time.Millisecond) // let trailing ACKs show
	d.showPackets()
	for _, c := range cqes {
		fmt.Fprintf(d.w, "  %s\n", c)
	}
	if check != nil && ok {
		if err := check(); err != nil {
			ok = false
			fmt.Fprintf(d.w, "  !! %v\n", err)
		} else {
			fmt.Fprintf(d.w, "  data checked\n")
		}
	}
	if !ok {
		d.fails++
	}
}

func wcExtra(w *verbs.WC) string {
	s := ""
	if w.Flags&verbs.WCFlagWithImm != 0 {
		s += fmt.Sprintf(" imm=%#x", w.Imm)
	}
	if w.Opcode >= verbs.WCRecv {
		s += fmt.Sprintf(" src_qp=%#x", w.SrcQP)
	}
	return s
}

func us(t time.Duration) string { return fmt.Sprintf("%.1fµs", float64(t.Nanoseconds())/1e3) }

// showPackets prints the packets of the step, decoded.
func (d *demo) showPackets() {
	d.mu.Lock()
	pkts := append([]wirePkt(nil), d.pkts...)
	d.mu.Unlock()
	fmt.Fprintf(d.w, "  on the wire (%d packets):\n", len(pkts))
	var line []byte
	for i, p := range pkts {
		fl := wire.Flow{Src: p.src, Dst: p.dst, SrcPort: p.sport}
		frame := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
		frame, err := fl.PseudoHeader(frame, len(p.b))
		if err != nil {
			continue
		}
		frame = append(frame, p.b...)
		rec := capture.Record{Index: i + 1, Time: p.t, LinkType: capture.LinkEthernet, Data: frame, Length: len(frame)}
		var cp capture.Packet
		d.dec.Decode(&rec, &cp)
		line = capture.AppendLine(line[:0], &cp)
		// Replace the wall-clock time with the time since the post.
		s := string(line)
		if i := strings.IndexByte(s, ' '); i > 0 {
			s = s[i+1:]
		}
		fmt.Fprintf(d.w, "    +%-8s %s\n", us(p.t.Sub(d.t0)), s)
	}
}

func (d *demo) word(n *node, off int, want uint64, what string) error {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(n.buf[off+i])
	}
	if v != want {
		return fmt.Errorf("%s is %d, want %d", what, v, want)
	}
	fmt.Fprintf(d.w, "  %s %s = %d\n", n.name, what, v)
	return nil
}

func same(what string, got, want []byte) error {
	if !bytes.Equal(got, want) {
		return errors.New(what + " differs from what was sent")
	}
	return nil
}
