package capture

import (
	"bufio"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/goroce/goroce/wire"
)

// Describe says what the message was, e.g. "SEND 4096 B",
// "RDMA WRITE 2053 B -> va=0x7f1200001000 rkey=0x00c0ffee",
// "RDMA READ 2148 B <- va=0x7f1200002000 rkey=0x00c0ffee",
// "CMP_SWAP va=0x1000 compare=0x0 swap=0x1 -> orig=0x0" or, for UD,
// "SEND 33 B qkey=0x11111111 srcqp=0x000014".
func (m *Message) Describe() string {
	var b []byte
	switch m.Op {
	case wire.OpSend:
		b = append(b, "SEND"...)
		switch {
		case m.HasImm:
			b = append(b, "_WITH_IMM"...)
		case m.HasInv:
			b = append(b, "_WITH_INV"...)
		}
		b = append(b, ' ')
		b = appendInt(b, m.Bytes)
		b = append(b, " B"...)
		if m.Transport == wire.TransportUD || m.Transport == wire.TransportRD {
			b = append(b, " qkey="...)
			b = appendHex(b, uint64(m.QKey), 8)
			b = append(b, " srcqp="...)
			b = appendHex(b, uint64(m.SrcQP), 6)
		}
	case wire.OpWrite:
		b = append(b, "RDMA WRITE"...)
		if m.HasImm {
			b = append(b, "_WITH_IMM"...)
		}
		b = append(b, ' ')
		b = appendInt(b, m.Bytes)
		b = append(b, " B"...)
		if !m.Partial {
			b = append(b, " -> va="...)
			b = appendHex(b, m.VA, 1)
			b = append(b, " rkey="...)
			b = appendHex(b, uint64(m.RKey), 8)
			if uint64(m.Bytes) != uint64(m.DMALen) {
				b = append(b, " dlen="...)
				b = appendUint(b, uint64(m.DMALen))
			}
		}
	case wire.OpReadRequest:
		b = append(b, "RDMA READ "...)
		b = appendInt(b, m.Bytes)
		b = append(b, " B <- va="...)
		b = appendHex(b, m.VA, 1)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(m.RKey), 8)
	case wire.OpCompareSwap, wire.OpFetchAdd:
		if m.Op == wire.OpCompareSwap {
			b = append(b, "CMP_SWAP va="...)
		} else {
			b = append(b, "FETCH_ADD va="...)
		}
		b = appendHex(b, m.VA, 1)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(m.RKey), 8)
		if m.Op == wire.OpCompareSwap {
			b = append(b, " compare="...)
			b = appendHex(b, m.Compare, 1)
			b = append(b, " swap="...)
		} else {
			b = append(b, " add="...)
		}
		b = appendHex(b, m.SwapAdd, 1)
		if m.HasOrig {
			b = append(b, " -> orig="...)
			b = appendHex(b, m.Orig, 1)
		}
	default:
		b = append(b, m.Opcode.String()...)
	}
	if m.HasImm {
		b = append(b, " imm="...)
		b = appendHex(b, uint64(m.Imm), 8)
	}
	if m.HasInv {
		b = append(b, " inv_rkey="...)
		b = appendHex(b, uint64(m.InvRKey), 8)
	}
	return string(b)
}

// Ending says how the message ended, e.g. "acked after 12.3µs",
// "RNR NAK (timer 1.28ms), retransmitted 1x, acked after 2ms",
// "NAK REMOTE_ACCESS_ERROR after 5µs" or "unanswered"; "" for UC and UD
// messages, which are never answered.
func (m *Message) Ending() string {
	var b []byte
	sep := func() {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
	}
	if m.Partial {
		b = append(b, "began before the capture"...)
	} else if !m.Complete {
		b = append(b, "incomplete"...)
	}
	if m.RNRNAKs > 0 {
		sep()
		b = append(b, "RNR NAK"...)
		if m.RNRNAKs > 1 {
			b = append(b, ' ')
			b = appendInt(b, m.RNRNAKs)
			b = append(b, 'x')
		}
		b = append(b, " (timer "...)
		b = append(b, m.RNRTimer.String()...)
		b = append(b, ')')
	}
	if m.SeqNAKs > 0 {
		sep()
		b = append(b, "NAK PSN_SEQUENCE_ERROR"...)
		if m.SeqNAKs > 1 {
			b = append(b, ' ')
			b = appendInt(b, m.SeqNAKs)
			b = append(b, 'x')
		}
	}
	if m.Retransmissions > 0 {
		sep()
		b = append(b, "retransmitted "...)
		b = appendInt(b, m.Retransmissions)
		b = append(b, 'x')
	}
	switch m.Status {
	case StatusAcked:
		sep()
		b = append(b, "acked after "...)
		b = append(b, m.Latency.String()...)
	case StatusNAK:
		sep()
		b = append(b, m.Syndrome.String()...)
		b = append(b, " after "...)
		b = append(b, m.Latency.String()...)
	case StatusRNR:
		sep()
		b = append(b, "no retry acked"...)
	case StatusUnanswered:
		sep()
		b = append(b, "unanswered"...)
	}
	return string(b)
}

func appendPSNRange(b []byte, m *Message) []byte {
	b = append(b, "psn "...)
	b = appendUint(b, uint64(m.FirstPSN))
	if m.LastPSN != m.FirstPSN {
		b = append(b, '-')
		b = appendUint(b, uint64(m.LastPSN))
	}
	return b
}

// WriteFlows writes the flow model as text: each flow that sent requests,
// with its messages, what they were and how they ended; then the flows
// whose responses matched no request.
func WriteFlows(w io.Writer, fs *Flows) error {
	bw := bufio.NewWriter(w)
	var b []byte
	for _, f := range fs.flows {
		if len(f.Messages) == 0 {
			continue
		}
		b = append(b[:0], f.Messages[0].Transport.String()...)
		b = append(b, ' ')
		b = f.Key.appendTo(b)
		if mtu := f.pmtu(); mtu > 0 {
			b = append(b, " pmtu="...)
			b = appendInt(b, mtu)
		}
		if f.AnsweredBy != nil {
			b = append(b, ", responses to dqp="...)
			b = appendHex(b, uint64(f.AnsweredBy.Key.DestQP), 6)
		}
		b = append(b, ": "...)
		b = appendInt(b, len(f.Messages))
		b = append(b, " messages\n"...)
		for _, m := range f.Messages {
			b = append(b, "  "...)
			b = appendPSNRange(b, m)
			b = append(b, ": "...)
			b = append(b, m.Describe()...)
			if e := m.Ending(); e != "" {
				b = append(b, ": "...)
				b = append(b, e...)
			}
			b = append(b, '\n')
		}
		if f.Stats.CNPs > 0 {
			b = append(b, "  CNPs: "...)
			b = appendInt(b, f.Stats.CNPs)
			b = append(b, '\n')
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	for _, f := range fs.flows {
		if f.Stats.Unmatched == 0 {
			continue
		}
		b = append(b[:0], "responses "...)
		b = f.Key.appendTo(b)
		b = append(b, ": "...)
		b = appendInt(b, f.Stats.Unmatched)
		b = append(b, " matched no request\n"...)
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteSummary writes a table of per-flow counts and the capture totals.
func WriteSummary(w io.Writer, fs *Flows) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	io.WriteString(tw, "src\tdst\tdqp\tpackets\tmessages\tbytes\tretrans\tNAKs\tRNR NAKs\tICRC bad\tmalformed\t\n")
	var b []byte
	for _, f := range fs.flows {
		s := &f.Stats
		b = f.Key.Src.AppendTo(b[:0])
		b = append(b, '\t')
		b = f.Key.Dst.AppendTo(b)
		b = append(b, '\t')
		b = appendHex(b, uint64(f.Key.DestQP), 6)
		for _, v := range [...]int{s.Packets, s.Messages, s.Bytes, s.Retransmissions, s.NAKs, s.RNRNAKs, s.ICRCBad, s.Malformed} {
			b = append(b, '\t')
			b = appendInt(b, v)
		}
		b = append(b, "\t\n"...)
		tw.Write(b)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := &fs.Totals
	_, err := io.WriteString(w, "total: "+strconv.Itoa(t.Records)+" records, "+
		strconv.Itoa(t.RoCE)+" RoCEv2 packets ("+strconv.Itoa(t.Malformed)+" malformed, "+
		strconv.Itoa(t.ICRCBad)+" ICRC failures), "+strconv.Itoa(t.Skipped)+" skipped (not RoCEv2)"+
		unsupported(t.Unsupported)+"\n")
	return err
}

func unsupported(n int) string {
	if n == 0 {
		return ""
	}
	return ", " + strconv.Itoa(n) + " skipped (unsupported link type)"
}
