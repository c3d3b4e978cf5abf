package capture

import (
	"bufio"
	"fmt"
	"io"
)

// Mode selects what Dump writes.
type Mode uint8

// Output modes.
const (
	ModeLines   Mode = iota // one line per RoCEv2 packet (AppendLine)
	ModeVerbose             // a block per RoCEv2 packet (AppendVerbose)
	ModeJSON                // one JSON object per RoCEv2 packet and line (AppendJSON)
	ModeFlows               // the flow model: messages and their answers (WriteFlows)
	ModeSummary             // per-flow counts and totals (WriteSummary)
)

// Options configures Dump.
type Options struct {
	Mode Mode
	// PMTU is the path MTU of every flow; 0 (the default) infers it per
	// flow (see Decoder).
	PMTU int
}

// Dump decodes every record of r and writes them to w as opt.Mode says.
// It returns the totals of what it read; the error is a read error (the
// totals then cover the records before it) or a write error.
func Dump(w io.Writer, r *Reader, opt Options) (Totals, error) {
	if r.format == FormatPcap && !r.link.Supported() {
		return Totals{}, fmt.Errorf("%w %d (%s)", ErrLinkType, uint32(r.link), r.link)
	}
	d := Decoder{PMTU: opt.PMTU}
	var (
		rec   Record
		p     Packet
		tot   Totals
		fs    *Flows
		buf   []byte
		rerr  error
		bw    = bufio.NewWriter(w)
		model = opt.Mode == ModeFlows || opt.Mode == ModeSummary
	)
	if model {
		fs = NewFlows()
	}
	for {
		if rerr = r.Next(&rec); rerr != nil {
			break
		}
		d.Decode(&rec, &p)
		if model {
			fs.Add(&p)
			continue
		}
		tot.Add(&p)
		if !p.RoCE {
			continue
		}
		switch opt.Mode {
		case ModeVerbose:
			buf = append(AppendVerbose(buf[:0], &p), '\n')
		case ModeJSON:
			buf = append(AppendJSON(buf[:0], &p), '\n')
		default:
			buf = append(AppendLine(buf[:0], &p), '\n')
		}
		if _, err := bw.Write(buf); err != nil {
			return tot, err
		}
	}
	if rerr == io.EOF {
		rerr = nil
	}
	var werr error
	switch opt.Mode {
	case ModeFlows:
		tot = fs.Totals
		werr = WriteFlows(bw, fs)
	case ModeSummary:
		tot = fs.Totals
		werr = WriteSummary(bw, fs)
	}
	if err := bw.Flush(); werr == nil {
		werr = err
	}
	if rerr != nil {
		return tot, rerr
	}
	return tot, werr
}
