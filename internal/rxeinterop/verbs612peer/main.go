// Command verbs612peer is one end of rxeinterop's TestVerbs612Rxe: the
// verbs of UC, memory windows with remote invalidation, and ATOMIC_WRITE,
// between a soft device (this machine) and rdma_rxe through libibverbs (the
// rxe-vm guest), each end doing every operation towards the other.
//
// The server listens on TCP -tcp for the client; the ends exchange their
// QPs, GID, memory and window keys as JSON lines, and sync between steps
// with one line each way. Each step's success prints "PASS name"; a failure
// prints "FAIL name: why" and exits 1.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/packetio/udp"
	"github.com/goroce/goroce/provider/soft"
	"github.com/goroce/goroce/verbs"
)

var (
	provider = flag.String("provider", "soft", "soft or ibverbs")
	dev      = flag.String("dev", "rxe0", "ibverbs: the device")
	gidIndex = flag.Int("gid", 1, "ibverbs: the GID index")
	addr     = flag.String("addr", "", "soft: the local IPv4 address")
	server   = flag.Bool("server", false, "listen for the peer (else connect to -peer)")
	peerAddr = flag.String("peer", "", "client: the server's address")
	tcpPort  = flag.Int("tcp", 18600, "the exchange's TCP port")
	timeout  = flag.Duration("timeout", 60*time.Second, "give up after")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Println("FAIL", err)
		os.Exit(1)
	}
	fmt.Println("PASS all")
}

// open returns the context and the GID index to use.
func open() (verbs.Context, int, error) {
	if *provider == "ibverbs" {
		c, err := openIbverbs(*dev)
		return c, *gidIndex, err
	}
	a, err := netip.ParseAddr(*addr)
	if err != nil {
		return nil, 0, fmt.Errorf("-addr: %w", err)
	}
	conn, err := udp.Listen(a, udp.Options{})
	if err != nil {
		return nil, 0, err
	}
	d, err := soft.New(soft.Options{Name: "soft0", Conn: conn})
	if err != nil {
		return nil, 0, err
	}
	c, err := d.Open()
	return c, verbs.DefaultGIDIndex, err
}

// dial returns the exchange's connection.
func dial() (net.Conn, error) {
	if *server {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", *tcpPort))
		if err != nil {
			return nil, err
		}
		defer l.Close()
		return l.Accept()
	}
	deadline := time.Now().Add(*timeout)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(*peerAddr, fmt.Sprint(*tcpPort)), time.Second)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// info is what an end tells the other.
type info struct {
	X, Y, U uint32 // RC QP x (the client's requests), y (the server's), UC QP
	Z       uint32 // RC QP z (FLUSH)
	GID     verbs.GID
	Addr    uint64
	RKey    uint32
	MWKey   uint32
	Role    byte
	// A region FLUSH may name (0: none).
	FlushAddr uint64
	FlushKey  uint32
}

// peer is the exchange.
type peer struct {
	r *bufio.Reader
	w net.Conn
}

func (p *peer) swap(me, them any) error {
	b, _ := json.Marshal(me)
	if _, err := p.w.Write(append(b, '\n')); err != nil {
		return err
	}
	line, err := p.r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	return json.Unmarshal(line, them)
}

func (p *peer) sync(step string) error {
	var got string
	if err := p.swap(step, &got); err != nil {
		return err
	}
	if got != step {
		return fmt.Errorf("sync %s: the peer is at %s", step, got)
	}
	return nil
}

func run() error {
	ctx, gidx, err := open()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	e, err := newEnd(ctx, gidx)
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return fmt.Errorf("exchange: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(*timeout))
	p := &peer{r: bufio.NewReader(c), w: c}
	e.role = 1
	if *server {
		e.role = 2
	}
	me := info{X: e.x.Num(), Y: e.y.Num(), Z: e.z.Num(), U: e.u.Num(), GID: e.gid, Addr: e.mr.Addr(), RKey: e.mr.RKey(), Role: e.role}
	var them info
	if err := p.swap(me, &them); err != nil {
		return err
	}
	if err := e.connect(&them); err != nil {
		return err
	}
	var fl [2]uint64 // the FLUSH region, once connect granted the QP its access
	if e.flushMR != nil {
		fl = [2]uint64{e.flushMR.Addr(), uint64(e.flushMR.RKey())}
	}
	if err := p.swap(fl, &fl); err != nil {
		return err
	}
	them.FlushAddr, them.FlushKey = fl[0], uint32(fl[1])
	return e.steps(p, &them)
}

// steps runs the test's steps, each end the same, syncing between them.
func (e *end) steps(p *peer, them *info) error {
	if err := e.bindMW(); err != nil {
		return fmt.Errorf("bind_mw: %w", err)
	}
	if err := p.swap(e.mwKey, &them.MWKey); err != nil {
		return err
	}
	fmt.Println("PASS bind_mw")
	if err := p.sync("bound"); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		f    func(*info) error
	}{{"atomic_write", e.atomicWrite}, {"uc_write_send", e.ucOps}, {"mw_write_send_with_inv", e.mwOps}} {
		if err := s.f(them); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	// FLUSH on its own QP: its outcome is reported, and the rest goes on.
	if err := e.flush(them); err != nil {
		fmt.Println("FAIL flush:", err)
	}
	if err := p.sync("done"); err != nil {
		return err
	}
	if err := e.check(them); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	fmt.Println("PASS placed")
	// Each end in turn writes through the window it invalidated: refused.
	for turn := byte(1); turn <= 2; turn++ {
		if err := p.sync(fmt.Sprint("turn", turn)); err != nil {
			return err
		}
		if turn == e.role {
			if err := e.writeInvalidated(them); err != nil {
				return fmt.Errorf("write_invalidated: %w", err)
			}
			fmt.Println("PASS write_invalidated")
		}
	}
	if err := p.sync("end"); err != nil {
		return err
	}
	if !bytes.Equal(e.buf[1040:1056], make([]byte, 16)) {
		return errors.New("a WRITE through the invalidated window reached memory")
	}
	return nil
}

func pattern(b []byte, role byte) {
	for i := range b {
		b[i] = role*16 + byte(i)
	}
}

func u64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }
