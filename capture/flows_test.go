package capture

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/wire"
)

// conv builds a synthetic capture: frames made with wire.AppendFrame, each
// at a time relative to testEpoch.
type conv struct {
	t      *testing.T
	frames [][]byte
	times  []time.Time
}

var (
	hostA = netip.MustParseAddr("192.0.2.1")
	hostB = netip.MustParseAddr("192.0.2.2")
)

const (
	qpA  = wire.QPN(0x000101) // A's RC QP
	qpB  = wire.QPN(0x000202) // B's RC QP
	udB  = wire.QPN(0x000303) // B's UD QP
	udA  = wire.QPN(0x000404) // A's UD QP
	rkey = 0x00000abc
)

// req adds a request from A to B's RC QP; resp a response from B to A's.
func (c *conv) req(at time.Duration, h wire.Header, payload int) {
	h.DestQP = qpB
	c.add(at, hostA, hostB, h, payload)
}

func (c *conv) resp(at time.Duration, h wire.Header, payload int) {
	h.DestQP = qpA
	c.add(at, hostB, hostA, h, payload)
}

func (c *conv) add(at time.Duration, src, dst netip.Addr, h wire.Header, payload int) {
	c.t.Helper()
	h.PKey = wire.DefaultPKey
	fl := wire.Flow{Src: src, Dst: dst, SrcPort: 0xC000 | uint16(h.DestQP), ID: uint16(len(c.frames))}
	b, err := wire.AppendFrame(nil, &fl, &h, make([]byte, payload))
	if err != nil {
		c.t.Fatal(err)
	}
	c.frames = append(c.frames, b)
	c.times = append(c.times, testEpoch.Add(at))
}

func (c *conv) pcap() []byte {
	var buf bytes.Buffer
	writePcapTimes(c.t, &buf, LinkEthernet, c.frames, c.times)
	return buf.Bytes()
}

// model runs the capture through the Decoder and the flow model.
func (c *conv) model(pmtu int) *Flows {
	fs := NewFlows()
	for _, p := range decodeStream(c.t, bytes.NewReader(c.pcap()), pmtu) {
		if p.Bad() {
			c.t.Fatalf("frame %d: %v ICRC %v", p.Index, p.Err, p.ICRC)
		}
		fs.Add(&p)
	}
	return fs
}

const us = time.Microsecond

// conversation is an RC exchange between A and B at path MTU 1024, and a UD
// SEND.
func conversation(t *testing.T) *conv {
	c := &conv{t: t}
	// RDMA WRITE of 2053 B in three packets, one ACK.
	reth := wire.RETHFields{VA: 0x1000, RKey: rkey, DMALen: 2053}
	c.req(0, wire.Header{Opcode: wire.RCWriteFirst, PSN: 100, RETH: reth}, 1024)
	c.req(1*us, wire.Header{Opcode: wire.RCWriteMiddle, PSN: 101}, 1024)
	c.req(2*us, wire.Header{Opcode: wire.RCWriteLast, PSN: 102, AckReq: true}, 5)
	c.resp(12*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 102, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: 1}}, 0)
	// SEND, lost, retransmitted after a timeout, then acked.
	c.req(20*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 103, AckReq: true}, 8)
	c.req(1020*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 103, AckReq: true}, 8)
	c.resp(1030*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 103, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: 2}}, 0)
	// RDMA READ of 2148 B: PSNs 104-106 reserved, three responses.
	c.req(1100*us, wire.Header{Opcode: wire.RCReadRequest, PSN: 104, AckReq: true, RETH: wire.RETHFields{VA: 0x8000, RKey: rkey, DMALen: 2148}}, 0)
	ack3 := wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: 3}
	c.resp(1110*us, wire.Header{Opcode: wire.RCReadResponseFirst, PSN: 104, AETH: ack3}, 1024)
	c.resp(1111*us, wire.Header{Opcode: wire.RCReadResponseMiddle, PSN: 105}, 1024)
	c.resp(1112*us, wire.Header{Opcode: wire.RCReadResponseLast, PSN: 106, AETH: ack3}, 100)
	// COMPARE SWAP at PSN 107 and its ATOMIC ACKNOWLEDGE.
	c.req(1200*us, wire.Header{Opcode: wire.RCCompareSwap, PSN: 107, AckReq: true,
		AtomicETH: wire.AtomicFields{VA: 0x9000, RKey: rkey, SwapAdd: 6, Compare: 5}}, 0)
	c.resp(1205*us, wire.Header{Opcode: wire.RCAtomicAcknowledge, PSN: 107, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: 4}, AtomicAck: 5}, 0)
	// SEND answered by RNR NAK (timer 14 = 1.28 ms), retried, acked.
	c.req(1300*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 108, AckReq: true}, 16)
	c.resp(1305*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 108, AETH: wire.AETHFields{Syndrome: wire.RNRNAK(14), MSN: 4}}, 0)
	c.req(2590*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 108, AckReq: true}, 16)
	c.resp(2600*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 108, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited, MSN: 5}}, 0)
	// RDMA WRITE answered by NAK remote access error.
	c.req(2700*us, wire.Header{Opcode: wire.RCWriteOnly, PSN: 109, AckReq: true, RETH: wire.RETHFields{VA: 0xdead0000, RKey: 0xbad, DMALen: 10}}, 10)
	c.resp(2705*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 109, AETH: wire.AETHFields{Syndrome: wire.NAKRemoteAccess, MSN: 5}}, 0)
	// A UD SEND from A's UD QP to B's.
	c.add(2800*us, hostA, hostB, wire.Header{Opcode: wire.UDSendOnly, DestQP: udB, PSN: 7,
		DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: udA}}, 33)
	return c
}

// msgWant is what a test expects of a Message.
type msgWant struct {
	op              wire.Operation
	first, last     wire.PSN
	packets, bytes  int
	status          Status
	syndrome        wire.Syndrome
	latency         time.Duration
	retx, rnr, seqs int
	describe        string // Describe() must contain this
	ending          string // Ending() must equal this
}

func checkMessages(t *testing.T, f *Flow, want []msgWant) {
	t.Helper()
	if len(f.Messages) != len(want) {
		t.Fatalf("%v: %d messages, want %d", f.Key, len(f.Messages), len(want))
	}
	for i, w := range want {
		m := f.Messages[i]
		if m.Op != w.op || m.FirstPSN != w.first || m.LastPSN != w.last || m.Packets != w.packets || m.Bytes != w.bytes {
			t.Errorf("message %d: op %v psn %d-%d packets %d bytes %d, want op %v psn %d-%d packets %d bytes %d",
				i, m.Op, m.FirstPSN, m.LastPSN, m.Packets, m.Bytes, w.op, w.first, w.last, w.packets, w.bytes)
		}
		if m.Status != w.status || m.Syndrome != w.syndrome || m.Latency != w.latency {
			t.Errorf("message %d: status %v syndrome %#x latency %v, want %v %#x %v", i, m.Status, m.Syndrome, m.Latency, w.status, w.syndrome, w.latency)
		}
		if m.Retransmissions != w.retx || m.RNRNAKs != w.rnr || m.SeqNAKs != w.seqs {
			t.Errorf("message %d: retx %d rnr %d seq NAKs %d, want %d %d %d", i, m.Retransmissions, m.RNRNAKs, m.SeqNAKs, w.retx, w.rnr, w.seqs)
		}
		if !m.Complete || m.Partial {
			t.Errorf("message %d: complete %v partial %v", i, m.Complete, m.Partial)
		}
		if d := m.Describe(); !strings.Contains(d, w.describe) {
			t.Errorf("message %d: Describe() = %q, want it to contain %q", i, d, w.describe)
		}
		if e := m.Ending(); e != w.ending {
			t.Errorf("message %d: Ending() = %q, want %q", i, e, w.ending)
		}
	}
}

func TestFlowsConversation(t *testing.T) {
	c := conversation(t)
	for _, pmtu := range []int{0, 1024} {
		fs := c.model(pmtu)
		reqKey := FlowKey{Src: hostA, Dst: hostB, DestQP: qpB}
		respKey := FlowKey{Src: hostB, Dst: hostA, DestQP: qpA}
		udKey := FlowKey{Src: hostA, Dst: hostB, DestQP: udB}
		rq, rs, ud := fs.Flow(reqKey), fs.Flow(respKey), fs.Flow(udKey)
		if rq == nil || rs == nil || ud == nil || len(fs.Flows()) != 3 {
			t.Fatalf("pmtu %d: flows %v", pmtu, fs.Flows())
		}
		if rq.AnsweredBy != rs || rs.Answers != rq || rq.Answers != nil || rs.AnsweredBy != nil || ud.AnsweredBy != nil {
			t.Errorf("pmtu %d: pairing wrong", pmtu)
		}
		if rq.PMTU != 1024 || rs.PMTU != 1024 {
			t.Errorf("pmtu %d: flow PMTUs %d and %d, want 1024", pmtu, rq.PMTU, rs.PMTU)
		}
		checkMessages(t, rq, []msgWant{
			{op: wire.OpWrite, first: 100, last: 102, packets: 3, bytes: 2053, status: StatusAcked, latency: 12 * us,
				describe: "RDMA WRITE 2053 B -> va=0x1000 rkey=0x00000abc", ending: "acked after 12µs"},
			{op: wire.OpSend, first: 103, last: 103, packets: 1, bytes: 8, status: StatusAcked, latency: 1010 * us, retx: 1,
				describe: "SEND 8 B", ending: "retransmitted 1x, acked after 1.01ms"},
			{op: wire.OpReadRequest, first: 104, last: 106, packets: 1, bytes: 2148, status: StatusAcked, latency: 12 * us,
				describe: "RDMA READ 2148 B <- va=0x8000 rkey=0x00000abc", ending: "acked after 12µs"},
			{op: wire.OpCompareSwap, first: 107, last: 107, packets: 1, status: StatusAcked, latency: 5 * us,
				describe: "CMP_SWAP va=0x9000 rkey=0x00000abc compare=0x5 swap=0x6 -> orig=0x5", ending: "acked after 5µs"},
			{op: wire.OpSend, first: 108, last: 108, packets: 1, bytes: 16, status: StatusAcked, latency: 1300 * us, retx: 1, rnr: 1,
				describe: "SEND 16 B", ending: "RNR NAK (timer 1.28ms), retransmitted 1x, acked after 1.3ms"},
			{op: wire.OpWrite, first: 109, last: 109, packets: 1, bytes: 10, status: StatusNAK, syndrome: wire.NAKRemoteAccess, latency: 5 * us,
				describe: "RDMA WRITE 10 B -> va=0xdead0000 rkey=0x00000bad", ending: "NAK REMOTE_ACCESS_ERROR after 5µs"},
		})
		if m := rq.Messages[2]; m.ReadBytes != 2148 || m.ReadPackets != 3 {
			t.Errorf("READ: %d bytes in %d responses, want 2148 in 3", m.ReadBytes, m.ReadPackets)
		}
		if m := rq.Messages[3]; !m.HasOrig || m.Orig != 5 {
			t.Errorf("CMP_SWAP: orig %v %d", m.HasOrig, m.Orig)
		}
		checkMessages(t, ud, []msgWant{
			{op: wire.OpSend, first: 7, last: 7, packets: 1, bytes: 33, status: StatusUnreliable,
				describe: "SEND 33 B qkey=0x11111111 srcqp=0x000404", ending: ""},
		})

		// Summary counts.
		if s := rq.Stats; s != (FlowStats{Packets: 10, Messages: 6, Bytes: 2053 + 8*2 + 16*2 + 10, Retransmissions: 2}) {
			t.Errorf("request flow stats %+v", s)
		}
		if s := rs.Stats; s != (FlowStats{Packets: 9, Bytes: 2148, NAKs: 1, RNRNAKs: 1}) {
			t.Errorf("response flow stats %+v", s)
		}
		if s := ud.Stats; s != (FlowStats{Packets: 1, Messages: 1, Bytes: 33}) {
			t.Errorf("UD flow stats %+v", s)
		}
		if tot := fs.Totals; tot != (Totals{Records: 20, RoCE: 20}) {
			t.Errorf("totals %+v", tot)
		}
	}
}

func TestFlowsText(t *testing.T) {
	c := conversation(t)
	var out bytes.Buffer
	r, err := NewReader(bytes.NewReader(c.pcap()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dump(&out, r, Options{Mode: ModeFlows}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"RC 192.0.2.1 > 192.0.2.2 dqp=0x000202 pmtu=1024, responses to dqp=0x000101: 6 messages",
		"  psn 100-102: RDMA WRITE 2053 B -> va=0x1000 rkey=0x00000abc: acked after 12µs",
		"  psn 103: SEND 8 B: retransmitted 1x, acked after 1.01ms",
		"  psn 104-106: RDMA READ 2148 B <- va=0x8000 rkey=0x00000abc: acked after 12µs",
		"  psn 107: CMP_SWAP va=0x9000 rkey=0x00000abc compare=0x5 swap=0x6 -> orig=0x5: acked after 5µs",
		"  psn 108: SEND 16 B: RNR NAK (timer 1.28ms), retransmitted 1x, acked after 1.3ms",
		"  psn 109: RDMA WRITE 10 B -> va=0xdead0000 rkey=0x00000bad: NAK REMOTE_ACCESS_ERROR after 5µs",
		"UD 192.0.2.1 > 192.0.2.2 dqp=0x000303: 1 messages",
		"  psn 7: SEND 33 B qkey=0x11111111 srcqp=0x000404",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", out.String(), strings.Join(want, "\n"))
	}

	out.Reset()
	r, _ = NewReader(bytes.NewReader(c.pcap()))
	if _, err := Dump(&out, r, Options{Mode: ModeSummary}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	fields := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for i, w := range []string{
		"src dst dqp packets messages bytes retrans NAKs RNR NAKs ICRC bad malformed",
		"192.0.2.1 192.0.2.2 0x000202 10 6 2111 2 0 0 0 0",
		"192.0.2.2 192.0.2.1 0x000101 9 0 2148 0 1 1 0 0",
		"192.0.2.1 192.0.2.2 0x000303 1 1 33 0 0 0 0 0",
		"total: 20 records, 20 RoCEv2 packets (0 malformed, 0 ICRC failures), 0 skipped (not RoCEv2)",
	} {
		if fields(lines[i]) != w {
			t.Errorf("summary line %d: %q, want %q", i, fields(lines[i]), w)
		}
	}
}

// An ACK may cover several messages; a PSN sequence NAK marks the message
// the requester must resend; responses before any request match nothing.
func TestFlowsCoalescedAndSequence(t *testing.T) {
	c := &conv{t: t}
	ack := func(psn wire.PSN) wire.Header {
		return wire.Header{Opcode: wire.RCAcknowledge, PSN: psn, AETH: wire.AETHFields{Syndrome: wire.ACKCredits(3)}}
	}
	c.resp(0, ack(5), 0) // nothing to answer yet
	c.req(10*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 200}, 4)
	c.req(11*us, wire.Header{Opcode: wire.RCSendFirst, PSN: 201}, 256)
	c.req(12*us, wire.Header{Opcode: wire.RCSendLast, PSN: 202, AckReq: true}, 4)
	c.req(13*us, wire.Header{Opcode: wire.RCWriteOnly, PSN: 204, AckReq: true, RETH: wire.RETHFields{VA: 8, RKey: 1, DMALen: 4}}, 4) // 203 lost
	c.resp(20*us, ack(202), 0)                                                                                                       // covers 200-202
	c.resp(21*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 203, AETH: wire.AETHFields{Syndrome: wire.NAKPSNSequence}}, 0)
	c.req(30*us, wire.Header{Opcode: wire.RCWriteOnly, PSN: 204, AckReq: true, RETH: wire.RETHFields{VA: 8, RKey: 1, DMALen: 4}}, 4)
	c.resp(40*us, ack(204), 0)
	c.req(50*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 205, AckReq: true}, 4) // never answered
	fs := c.model(0)
	rq := fs.Flow(FlowKey{Src: hostA, Dst: hostB, DestQP: qpB})
	rs := fs.Flow(FlowKey{Src: hostB, Dst: hostA, DestQP: qpA})
	if rq.PMTU != 256 {
		t.Errorf("inferred PMTU %d, want 256", rq.PMTU)
	}
	checkMessages(t, rq, []msgWant{
		{op: wire.OpSend, first: 200, last: 200, packets: 1, bytes: 4, status: StatusAcked, latency: 10 * us, describe: "SEND 4 B", ending: "acked after 10µs"},
		{op: wire.OpSend, first: 201, last: 202, packets: 2, bytes: 260, status: StatusAcked, latency: 9 * us, describe: "SEND 260 B", ending: "acked after 9µs"},
		{op: wire.OpWrite, first: 204, last: 204, packets: 1, bytes: 4, status: StatusAcked, latency: 27 * us, retx: 1,
			describe: "RDMA WRITE 4 B", ending: "retransmitted 1x, acked after 27µs"},
		{op: wire.OpSend, first: 205, last: 205, packets: 1, bytes: 4, status: StatusUnanswered, describe: "SEND 4 B", ending: "unanswered"},
	})
	// The NAK for 203 points at a PSN no message holds (the lost packet
	// carried nothing the capture saw), so it is unmatched, as is the ACK
	// before any request.
	if rs.Stats.Unmatched != 2 || rs.Stats.NAKs != 1 {
		t.Errorf("response stats %+v", rs.Stats)
	}
}

// A READ whose path MTU is not known when it is sent gets its PSN
// reservation from its first response.
func TestFlowsReadUnknownPMTU(t *testing.T) {
	c := &conv{t: t}
	ack := wire.AETHFields{Syndrome: wire.ACKUnlimited}
	c.req(0, wire.Header{Opcode: wire.RCReadRequest, PSN: 0xFFFFFE, RETH: wire.RETHFields{VA: 0x100, RKey: 2, DMALen: 5000}}, 0)
	c.resp(5*us, wire.Header{Opcode: wire.RCReadResponseFirst, PSN: 0xFFFFFE, AETH: ack}, 2048)
	c.resp(6*us, wire.Header{Opcode: wire.RCReadResponseMiddle, PSN: 0xFFFFFF}, 2048)
	c.req(7*us, wire.Header{Opcode: wire.RCSendOnly, PSN: 1, AckReq: true}, 4) // PSN 0 is the READ's third
	c.resp(8*us, wire.Header{Opcode: wire.RCReadResponseLast, PSN: 0, AETH: ack}, 904)
	c.resp(9*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 1, AETH: ack}, 0)
	fs := c.model(0)
	rq := fs.Flow(FlowKey{Src: hostA, Dst: hostB, DestQP: qpB})
	checkMessages(t, rq, []msgWant{
		{op: wire.OpReadRequest, first: 0xFFFFFE, last: 0, packets: 1, bytes: 5000, status: StatusAcked, latency: 8 * us,
			describe: "RDMA READ 5000 B", ending: "acked after 8µs"},
		{op: wire.OpSend, first: 1, last: 1, packets: 1, bytes: 4, status: StatusAcked, latency: 2 * us, describe: "SEND 4 B", ending: "acked after 2µs"},
	})
	if m := rq.Messages[0]; m.ReadBytes != 5000 || m.ReadPackets != 3 {
		t.Errorf("READ: %d bytes in %d responses", m.ReadBytes, m.ReadPackets)
	}
}

// Two requesters on one host pair: responses pair with the flow whose
// outstanding PSNs hold theirs.
func TestFlowsPairing(t *testing.T) {
	c := &conv{t: t}
	ack := wire.AETHFields{Syndrome: wire.ACKUnlimited}
	const qpB2, qpA2 = wire.QPN(0x222), wire.QPN(0x111)
	c.req(0, wire.Header{Opcode: wire.RCSendOnly, PSN: 1000, AckReq: true}, 4)
	c.add(1*us, hostA, hostB, wire.Header{Opcode: wire.RCSendOnly, DestQP: qpB2, PSN: 5000, AckReq: true}, 4)
	c.add(2*us, hostB, hostA, wire.Header{Opcode: wire.RCAcknowledge, DestQP: qpA2, PSN: 5000, AETH: ack}, 0)
	c.resp(3*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 1000, AETH: ack}, 0)
	fs := c.model(0)
	f1 := fs.Flow(FlowKey{Src: hostA, Dst: hostB, DestQP: qpB})
	f2 := fs.Flow(FlowKey{Src: hostA, Dst: hostB, DestQP: qpB2})
	if f1.AnsweredBy == nil || f1.AnsweredBy.Key.DestQP != qpA || f2.AnsweredBy == nil || f2.AnsweredBy.Key.DestQP != qpA2 {
		t.Fatalf("pairing: %v -> %v, %v -> %v", f1.Key, f1.AnsweredBy, f2.Key, f2.AnsweredBy)
	}
	if f1.Messages[0].Status != StatusAcked || f2.Messages[0].Status != StatusAcked {
		t.Errorf("statuses %v %v", f1.Messages[0].Status, f2.Messages[0].Status)
	}
}

// A go-back-N pass that resends every packet of a message counts as one
// retransmission of it; each resent packet counts in the flow's stats.
func TestFlowsGoBackN(t *testing.T) {
	c := &conv{t: t}
	reth := wire.RETHFields{VA: 0x40, RKey: 3, DMALen: 600}
	send := func(at time.Duration) {
		c.req(at, wire.Header{Opcode: wire.RCWriteFirst, PSN: 10, RETH: reth}, 256)
		c.req(at+us, wire.Header{Opcode: wire.RCWriteMiddle, PSN: 11}, 256)
		c.req(at+2*us, wire.Header{Opcode: wire.RCWriteLast, PSN: 12, AckReq: true}, 88)
	}
	send(0)
	send(100 * us)
	send(300 * us)
	c.resp(310*us, wire.Header{Opcode: wire.RCAcknowledge, PSN: 12, AETH: wire.AETHFields{Syndrome: wire.ACKUnlimited}}, 0)
	fs := c.model(0)
	rq := fs.Flow(FlowKey{Src: hostA, Dst: hostB, DestQP: qpB})
	checkMessages(t, rq, []msgWant{
		{op: wire.OpWrite, first: 10, last: 12, packets: 3, bytes: 600, status: StatusAcked, latency: 310 * us, retx: 2,
			describe: "RDMA WRITE 600 B -> va=0x40 rkey=0x00000003", ending: "retransmitted 2x, acked after 310µs"},
	})
	if rq.Stats.Retransmissions != 6 || rq.Stats.Packets != 9 || rq.Stats.Messages != 1 {
		t.Errorf("stats %+v", rq.Stats)
	}
}
