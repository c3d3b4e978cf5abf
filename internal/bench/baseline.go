package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"time"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/packetio"
	"github.com/goroce/goroce/verbs"
)

// The raw-UDP baseline: the same traffic shape as a test, as plain datagrams
// on the same packet path (packetio: batched sendmmsg/recvmmsg on UDP port
// 4791), without the RoCE transport. A message of a bandwidth test is the
// datagrams its RoCE packets would be (one per path-MTU chunk, each with the
// BTH and ICRC, and a RETH on the first of a WRITE or READ), sent with a
// window of TxDepth messages (at most 512 datagrams, as the engine's) that
// the receiver opens with a small ACK datagram per message (at least every
// baseAckEvery datagrams), as RoCE's ACKs do; READ runs the stream the other
// way. Both sides poll for 50 µs after the last datagram and then sleep in
// Receive, as the soft device's driver does. A latency test is a ping-pong of one
// datagram each way (Options.BaseACK: each followed by an ACK datagram). The
// TCP connection carries only the start and the receiver's count and time.

const (
	baseAckEvery = 16
	baseAckLen   = 16 // an ACK datagram: BTH, AETH (as RoCE's)
	baseSilence  = 300 * time.Millisecond
	baseRetry    = 100 * time.Millisecond
	baseWindow   = 512
	baseSpin     = 50 * time.Microsecond // as soft.Options.Spin's default
	baseBlock    = 5 * time.Millisecond
	// baseAckSeq marks the ACK datagrams of a ping-pong (Options.BaseACK)
	// where its messages carry their sequence number.
	baseAckSeq = math.MaxUint32
)

// baseSizes returns the datagram sizes of one message of size bytes.
func baseSizes(t Test, size, mtu int) []int {
	var s []int
	for off := 0; off < size || off == 0; off += mtu {
		chunk := min(mtu, size-off)
		d := 12 + chunk + 4 // BTH, data, ICRC
		if off == 0 && t.Verb != Send {
			d += 16 // RETH
		}
		s = append(s, d)
		if size == 0 {
			break
		}
	}
	return s
}

// Baseline runs one side of the raw-UDP equivalent of o.Test on conn, with
// peer the other side's address, and ctl the control connection (as for
// Run). The datagrams follow o.MTU (default 1024), the smaller of the two
// sides'. Only the client reports a result; for a bandwidth test it holds
// the average (there is no peak: 0).
func Baseline(ctx context.Context, conn packetio.Conn, peer netip.Addr, ctl *perftest.Conn, o Options) (Result, error) {
	if err := o.normalize(); err != nil {
		return Result{}, err
	}
	if o.QPs != 1 || o.All || o.Duration > 0 || o.Test.Verb == Atomic || o.Test.Verb == Read && o.Test.Lat {
		return Result{}, fmt.Errorf("%w: the UDP baseline covers send/write/read_bw and send/write_lat with one QP and -n", ErrUsage)
	}
	if o.BaseACK && !o.Test.Lat {
		return Result{}, fmt.Errorf("%w: the baseline's ACK per message is for latency tests (a bandwidth baseline acknowledges as RoCE does already)", ErrUsage)
	}
	stop := context.AfterFunc(ctx, func() { ctl.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, _, err := ctl.ExchangeVersions(perftest.Version); err != nil {
		return Result{}, err
	}
	mtu := o.MTU
	if mtu == 0 {
		mtu = verbs.MTU1024 // what a 1500-byte Ethernet carries
	}
	mtu, err := ctl.ExchangeMTU(mtu)
	if err != nil {
		return Result{}, err
	}
	if _, err := ctl.HandShake(perftest.Dest{}); err != nil { // both ready
		return Result{}, err
	}
	b := &baseline{conn: conn, peer: peer, ctx: ctx, past: time.Unix(1, 0)} // past: Receive polls
	if o.Test.Lat {
		return b.pingPong(o, ctl)
	}
	sizes := baseSizes(o.Test, o.Size, mtu.Bytes())
	sender := o.Client != (o.Test.Verb == Read)
	total := o.Iters * len(sizes)
	var got int
	var el time.Duration
	if sender {
		// The engine keeps at most 512 packets of a QP unacknowledged
		// (engine.Config.Window's default): so does the baseline.
		if err := b.send(sizes, o.Iters, min(o.TxDepth*len(sizes), baseWindow)); err != nil {
			return Result{}, err
		}
	} else {
		// An ACK per message, as RoCE asks for one on a message's last
		// packet, but at least every baseAckEvery datagrams.
		got, el, err = b.receive(total, max(baseAckEvery, len(sizes)))
		if err != nil {
			return Result{}, err
		}
	}
	rep, err := ctl.ExchangeReports(perftest.Report{Iters: uint64(got), BWAvg: float64(el)})
	if err != nil {
		return Result{}, err
	}
	if sender {
		got, el = int(rep.Iters), time.Duration(rep.BWAvg)
	}
	msgs := got / len(sizes)
	r := Result{Size: o.Size, Iters: uint64(msgs)}
	if el > 0 && got > 1 {
		// The first datagram marks the start: got-1 arrived after it.
		s := el.Seconds() * float64(got) / float64(got-1)
		unit := float64(1 << 20)
		if o.Gbits {
			unit = 125e6
		}
		r.BWAvg = float64(o.Size) * float64(msgs) / s / unit
		r.MsgRate = float64(msgs) / s / 1e6
	}
	if got < total {
		return r, fmt.Errorf("raw UDP baseline: %d of %d datagrams arrived", got, total)
	}
	return r, nil
}

type baseline struct {
	conn packetio.Conn
	peer netip.Addr
	ctx  context.Context
	past time.Time // a deadline already passed: Receive polls (the zero time would wait forever)
}

// send sends msgs messages of the datagram sizes, at most window datagrams
// ahead of what the receiver acknowledged. It gives up (the receiver's
// count then tells the loss) when no acknowledgement comes for baseSilence.
func (b *baseline) send(sizes []int, msgs, window int) error {
	total := msgs * len(sizes)
	window = max(window, baseAckEvery*2)
	sent, acked, si, batches := 0, 0, 0, 0
	lastProgress := time.Now()
	for acked < total {
		k := min(32, total-sent, window-(sent-acked))
		if k > 0 {
			pkts := b.conn.TxBatch(k)
			for i := range pkts {
				pkts[i].Buf = pkts[i].Buf[:sizes[si]]
				binary.BigEndian.PutUint32(pkts[i].Buf, uint32(sent+i))
				pkts[i].Addr = b.peer
				if si++; si == len(sizes) {
					si = 0
				}
			}
			n, err := b.conn.Transmit(pkts)
			if err != nil {
				return fmt.Errorf("raw UDP baseline: send: %w", err)
			}
			sent += n
		}
		// Look for ACKs after every fourth batch (a poll is a syscall); with
		// nothing more to send, sleep in Receive until one comes.
		deadline := b.past
		if k <= 0 {
			deadline = time.Now().Add(baseBlock)
		} else if batches++; batches%4 != 0 {
			continue
		}
		pk, err := b.conn.Receive(deadline)
		if err != nil {
			return err
		}
		for _, p := range pk {
			if len(p.Buf) == baseAckLen {
				if a := int(binary.BigEndian.Uint64(p.Buf[4:])); a > acked {
					acked, lastProgress = a, time.Now()
				}
			}
		}
		if time.Since(lastProgress) > baseSilence {
			return nil // datagrams or ACKs were lost: the receiver's count says how many
		}
		if err := b.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// receive counts datagrams until total arrived or the sender fell silent,
// acknowledging every ackEvery; it returns the count and the time from
// the first to the last.
func (b *baseline) receive(total, ackEvery int) (int, time.Duration, error) {
	got, acked := 0, 0
	var first, last time.Time
	ack := func() error {
		pkts := b.conn.TxBatch(1)
		if len(pkts) == 0 {
			return packetio.ErrClosed
		}
		pkts[0].Buf = pkts[0].Buf[:baseAckLen]
		binary.BigEndian.PutUint64(pkts[0].Buf[4:], uint64(got))
		pkts[0].Addr = b.peer
		_, err := b.conn.Transmit(pkts[:1])
		acked = got
		return err
	}
	idleSince := time.Now()
	for got < total {
		// Poll for a while after the last datagram, then sleep in Receive,
		// as the soft device's driver does.
		deadline := b.past
		if time.Since(idleSince) > baseSpin {
			deadline = time.Now().Add(baseBlock)
		}
		pk, err := b.conn.Receive(deadline)
		if err != nil {
			return got, 0, err
		}
		if len(pk) == 0 {
			if got > 0 && time.Since(idleSince) > baseSilence || time.Since(idleSince) > 30*time.Second {
				break
			}
			if err := b.ctx.Err(); err != nil {
				return got, 0, err
			}
			runtime.Gosched()
			continue
		}
		now := time.Now()
		idleSince = now
		for _, p := range pk {
			if len(p.Buf) == baseAckLen {
				continue
			}
			if got == 0 {
				first = now
			}
			got++
			last = now
		}
		if got-acked >= ackEvery || got == total {
			if err := ack(); err != nil {
				return got, 0, err
			}
		}
	}
	return got, last.Sub(first), nil
}

// pingPong is the latency baseline: the client sends a datagram and waits
// for the server's, n times (a lost one is sent again after baseRetry).
func (b *baseline) pingPong(o Options, ctl *perftest.Conn) (Result, error) {
	size := 12 + o.Size + 4
	if o.Test.Verb == Write {
		size += 16
	}
	n := o.Iters
	tposted := timestamps(n)
	clk := newClock()
	p := basePing{b: b, o: &o, size: size, n: n}
	for i := 0; i < n; i++ {
		if o.Client {
			tposted[i] = clk.now()
			if err := p.send(i); err != nil {
				return Result{}, err
			}
			if err := p.wait(i, true); err != nil {
				return Result{}, fmt.Errorf("raw UDP ping-pong %d: %w", i, err)
			}
		} else {
			if err := p.wait(i, false); err != nil {
				return Result{}, fmt.Errorf("raw UDP ping-pong %d: %w", i, err)
			}
			tposted[i] = clk.now()
			if err := p.send(i); err != nil {
				return Result{}, err
			}
		}
	}
	if !o.Client {
		return Result{}, p.answerLast(ctl)
	}
	if o.BaseACK {
		// The last reply's ACK, which the server takes in while it waits
		// for the end.
		if err := p.transmit(baseAckSeq, baseAckLen, false); err != nil {
			return Result{}, err
		}
	}
	if _, err := ctl.HandShake(perftest.Dest{}); err != nil {
		return Result{}, err
	}
	if err := p.ackCheck(); err != nil {
		return Result{}, err
	}
	r := latResult(o.Size, tposted, 2)
	if math.IsNaN(r.Avg) {
		return r, fmt.Errorf("raw UDP ping-pong: no figures")
	}
	return r, nil
}

// basePing is what the latency baseline's sends and waits (pingPong)
// share: the length of a message's datagram, the number of exchanges, the
// peer's ACK datagrams received (acked, Options.BaseACK), and whether this
// side has received a message it has not yet acknowledged (got).
type basePing struct {
	b     *baseline
	o     *Options
	size  int
	n     int
	acked int
	got   bool
}

// transmit sends one datagram of length bytes that starts with seq and,
// with ack, behind it the ACK of the message last received, in a Transmit
// of its own.
func (p *basePing) transmit(seq uint32, length int, ack bool) error {
	pkts := p.b.conn.TxBatch(1)
	if len(pkts) == 0 {
		return packetio.ErrClosed
	}
	pkts[0].Buf = pkts[0].Buf[:length]
	binary.BigEndian.PutUint32(pkts[0].Buf, seq)
	pkts[0].Addr = p.b.peer
	if _, err := p.b.conn.Transmit(pkts[:1]); err != nil || !ack {
		return err
	}
	p.got = false
	return p.transmit(baseAckSeq, baseAckLen, false)
}

// send sends message i and, with Options.BaseACK, the ACK of the message
// last received if not yet sent. It runs once per exchange: it must stay
// small enough to be inlined.
func (p *basePing) send(i int) error {
	return p.transmit(uint32(i), p.size, p.o.BaseACK && p.got)
}

// wait takes in datagrams until a message numbered want or later arrives,
// counting the ACKs among them. It polls for baseSpin, unless busy, then
// sleeps in Receive; with retry it sends message want again after
// baseRetry without it.
func (p *basePing) wait(want int, retry bool) error {
	b, o := p.b, p.o
	since := time.Now()
	for {
		deadline := b.past
		if !o.Busy && time.Since(since) > baseSpin {
			deadline = time.Now().Add(baseBlock)
		}
		pk, err := b.conn.Receive(deadline)
		if err != nil {
			return err
		}
		done := false
		for _, d := range pk {
			if len(d.Buf) < 4 {
				continue
			}
			switch seq := binary.BigEndian.Uint32(d.Buf); {
			case seq == baseAckSeq && len(d.Buf) == baseAckLen:
				p.acked++
			case int(seq) >= want:
				done, p.got = true, true
			}
		}
		if done {
			return nil
		}
		if len(pk) == 0 {
			if time.Since(since) > baseRetry && retry {
				if err := p.send(want); err != nil {
					return err
				}
				since = time.Now()
			}
			if err := b.ctx.Err(); err != nil {
				return err
			}
			runtime.Gosched()
		}
	}
}

// ackCheck fails the run when ACKs went missing (Options.BaseACK): every
// ACK but the last (on the server, the last two: the client sends each
// behind its next message) arrived before the last message; fewer mean the
// baseline is not what it says.
func (p *basePing) ackCheck() error {
	if p.o.BaseACK && p.acked < p.n-2 {
		return fmt.Errorf("raw UDP ping-pong: %d ACK datagrams of %d arrived", p.acked, p.n)
	}
	return nil
}

// answerLast is the server's end of the ping-pong: it answers the client's
// retries of the last message until the client's closing handshake on ctl
// comes, then checks the ACKs.
func (p *basePing) answerLast(ctl *perftest.Conn) error {
	done := make(chan error, 1)
	go func() { _, err := ctl.HandShake(perftest.Dest{}); done <- err }()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = p.ackCheck()
			}
			return err
		default:
		}
		pk, err := p.b.conn.Receive(time.Now().Add(baseBlock))
		if err != nil {
			return err
		}
		for _, d := range pk {
			if len(d.Buf) >= 4 && int(binary.BigEndian.Uint32(d.Buf)) == p.n-1 {
				p.send(p.n - 1)
			}
		}
	}
}
