package agent

import (
	"bufio"
	"io"
	"strconv"
	"time"

	"github.com/goroce/goroce/probe"
)

// jsonlQueue is the number of results waiting for the JSON-lines writer;
// beyond it results are dropped from the file (and counted), never waited
// for.
const jsonlQueue = 8192

// appendJSONL appends r as one JSON object and a newline, allocating
// nothing when b has room. The fields:
// time (T1, RFC 3339 with nanoseconds), src, dst, dst_addr, group,
// dst_group, class, seq, label, sport, qpn, outcome, reason, t1..t6 (ns),
// rtt_ns, prober_delay_ns, responder_delay_ns, timestamps.
func appendJSONL(b []byte, src, srcGroup string, r *probe.Result) []byte {
	b = append(b, `{"time":"`...)
	b = r.Sent.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = append(b, `,"src":`...)
	b = strconv.AppendQuote(b, src)
	b = append(b, `,"dst":`...)
	b = strconv.AppendQuote(b, r.Peer.Name)
	b = append(b, `,"dst_addr":"`...)
	b = r.Peer.Addr.AppendTo(b)
	b = append(b, '"')
	b = append(b, `,"group":`...)
	b = strconv.AppendQuote(b, srcGroup)
	b = append(b, `,"dst_group":`...)
	b = strconv.AppendQuote(b, r.Peer.Group)
	b = append(b, `,"class":`...)
	b = strconv.AppendQuote(b, r.Class)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"label":`...)
	b = strconv.AppendUint(b, uint64(r.FlowLabel), 10)
	b = append(b, `,"sport":`...)
	b = strconv.AppendUint(b, uint64(r.SrcPort), 10)
	b = append(b, `,"qpn":`...)
	b = strconv.AppendUint(b, uint64(r.ResponderQPN), 10)
	b = append(b, `,"outcome":"`...)
	b = append(b, r.Outcome.String()...)
	b = append(b, '"')
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = strconv.AppendQuote(b, r.Reason)
	}
	for i, t := range [...]int64{r.T1, r.T2, r.T3, r.T4, r.T5, r.T6} {
		b = append(b, `,"t`...)
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, t, 10)
	}
	b = append(b, `,"rtt_ns":`...)
	b = strconv.AppendInt(b, int64(r.NetworkRTT), 10)
	b = append(b, `,"prober_delay_ns":`...)
	b = strconv.AppendInt(b, int64(r.ProberDelay), 10)
	b = append(b, `,"responder_delay_ns":`...)
	b = strconv.AppendInt(b, int64(r.ResponderDelay), 10)
	b = append(b, `,"timestamps":"`...)
	b = append(b, r.Timestamps.String()...)
	b = append(b, '"')
	return append(b, "}\n"...)
}

// writeJSONL writes the queued results to w until the queue is closed,
// flushing whenever the queue runs empty.
func (a *Agent) writeJSONL(w io.Writer, done chan<- struct{}) {
	defer close(done)
	bw := bufio.NewWriterSize(w, 64<<10)
	var line []byte
	failed := false
	for r := range a.jsonl {
		self := &a.cfg.Load().self // the node's name and group as of now
		line = appendJSONL(line[:0], self.Name, self.Group, &r)
		if _, err := bw.Write(line); err != nil && !failed {
			failed = true
			a.log.Error("writing the probe log", "err", err)
		}
		if len(a.jsonl) == 0 {
			if err := bw.Flush(); err != nil && !failed {
				failed = true
				a.log.Error("writing the probe log", "err", err)
			}
		}
	}
	bw.Flush()
}
