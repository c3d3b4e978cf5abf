package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/cm/perftest"
	"github.com/goroce/goroce/verbs"
)

// perftest's report: the test's settings, the addresses and GIDs, the result
// table with perftest's header and columns, and goroce's JSON form of it.

var testVerbNames = map[Verb]string{Send: "Send", Write: "RDMA_Write", Read: "RDMA_Read", Atomic: "Atomic"}

// ResultLine is the rule perftest prints between the parts of a report.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// WriteReport prints a side's report as perftest does: the test's
// settings, the addresses, the result table.
func WriteReport(w io.Writer, devName, path string, o Options, out *Outcome) {
	var b strings.Builder
	o.normalize() // the settings the run used: the defaults filled in (a bad o never ran)
	b.WriteString(ResultLine)
	writeTitle(&b, &o)
	writeSettings(&b, devName, path, &o, out)
	b.WriteString(ResultLine)
	writeAddresses(&b, o.Test, out)
	b.WriteString(ResultLine)
	io.WriteString(w, b.String())
	WriteRows(w, o, out)
}

// writeTitle prints the report's title line: the verb (for atomics the
// operation too) and the kind of test.
func writeTitle(b *strings.Builder, o *Options) {
	t := o.Test
	b.WriteString("                    " + testVerbNames[t.Verb] + " ")
	if t.Verb == Atomic {
		if o.Atomic == verbs.WRAtomicCmpAndSwp {
			b.WriteString("CMP_AND_SWAP ")
		} else {
			b.WriteString("FETCH_AND_ADD ")
		}
	}
	if t.Lat {
		b.WriteString("Latency Test\n")
		return
	}
	if o.Duplex {
		b.WriteString("Bidirectional ")
	}
	if o.PostList > 1 {
		b.WriteString("Post List ")
	}
	b.WriteString("BW Test\n")
}

// writeSettings prints the test's settings, as those of perftest's report
// that apply to the test and this side.
func writeSettings(b *strings.Builder, devName, path string, o *Options, out *Outcome) {
	t := o.Test
	fmt.Fprintf(b, " Dual-port       : OFF\t\tDevice         : %s\n", devName)
	if path != "" {
		fmt.Fprintf(b, " Packet path     : %s\n", path)
	}
	fmt.Fprintf(b, " Number of qps   : %d\t\tTransport type : IB\n", o.QPs)
	conn := "RC"
	if o.UD {
		conn = "UD"
	}
	fmt.Fprintf(b, " Connection type : %s\t\tUsing SRQ      : OFF\n", conn)
	if o.Client || o.Duplex {
		fmt.Fprintf(b, " TX depth        : %d\n", o.TxDepth)
		if o.PostList > 1 {
			fmt.Fprintf(b, " Post List       : %d\n", o.PostList)
		}
	}
	if t.Verb == Send && (!o.Client || t.Lat || o.Duplex) {
		fmt.Fprintf(b, " RX depth        : %d\n", o.RxDepth)
	}
	if !t.Lat {
		fmt.Fprintf(b, " CQ Moderation   : %d\n", o.CQMod)
	}
	fmt.Fprintf(b, " Mtu             : %d[B]\n", out.MTU.Bytes())
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(b, " GID index       : %d\n", o.GIDIndex)
	if t.Verb == Read || t.Verb == Atomic {
		if len(out.Local) > 0 {
			fmt.Fprintf(b, " Outstand reads  : %d\n", out.Local[0].OutReads)
		}
	} else {
		fmt.Fprintf(b, " Max inline data : %d[B]\n", o.Inline)
	}
	if out.RDMACM {
		b.WriteString(" rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n")
	} else {
		b.WriteString(" rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n")
	}
}

// writeAddresses prints this side's keys and GID for each QP, then the
// peer's it received, as ctx_print_pingpong_data: READ adds the
// outstanding reads, READ and WRITE the R_Key and address; SEND and
// atomics print neither. Under -R perftest prints the basic format only
// (its exchange's verb is SEND).
func writeAddresses(b *strings.Builder, t Test, out *Outcome) {
	rdma := (t.Verb == Write || t.Verb == Read) && !out.RDMACM
	outs := t.Verb == Read && !out.RDMACM
	for _, d := range out.Local {
		fmt.Fprintf(b, " local address: %s\n", d.Format(rdma, outs))
		fmt.Fprintf(b, " GID: %s\n", perftest.FormatGID(d.GID))
	}
	for _, d := range out.Remote {
		if d.QPN == 0 && d.GID == (verbs.GID{}) {
			continue
		}
		fmt.Fprintf(b, " remote address: %s\n", d.Format(rdma, outs))
		fmt.Fprintf(b, " GID: %s\n", perftest.FormatGID(d.GID))
	}
}

// WriteRows prints the result table and the lines that follow it.
func WriteRows(w io.Writer, o Options, out *Outcome) {
	var b strings.Builder
	t := o.Test
	timed := o.Duration > 0
	switch {
	case !t.Lat:
		if o.Gbits {
			b.WriteString(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n")
		} else {
			b.WriteString(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n")
		}
		for _, r := range out.Results {
			fmt.Fprintf(&b, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		}
	case timed:
		b.WriteString(" #bytes        #iterations       t_avg[usec]    tps average\n")
		for _, r := range out.Results {
			fmt.Fprintf(&b, " %-7d       %d            %-7.2f        %-7.2f\n", r.Size, r.Iters, r.Avg, r.TPS)
		}
	default:
		b.WriteString(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n")
		for _, r := range out.Results {
			fmt.Fprintf(&b, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
				r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
		}
	}
	b.WriteString(ResultLine)
	if t.Lat && !timed {
		for _, r := range out.Results {
			fmt.Fprintf(&b, " percentiles[usec] #bytes %d: p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", r.Size, r.P50, r.P99, r.P999, r.MaxAll)
		}
	}
	for _, r := range out.Results {
		if r.Verified {
			fmt.Fprintf(&b, " data verified: #bytes %d\n", r.Size)
		}
	}
	io.WriteString(w, b.String())
}

// JSONDest is one side's key message in a JSON report.
type JSONDest struct {
	LID      uint16 `json:"lid"`
	OutReads uint16 `json:"out_reads"`
	QPN      uint32 `json:"qpn"`
	PSN      uint32 `json:"psn"`
	RKey     uint32 `json:"rkey"`
	VAddr    uint64 `json:"vaddr"`
	GID      string `json:"gid"`
}

// JSONResult is one row of a JSON report.
type JSONResult struct {
	Bytes      int      `json:"bytes"`
	Iterations uint64   `json:"iterations"`
	BWPeak     *float64 `json:"bw_peak,omitempty"`
	BWAverage  *float64 `json:"bw_average,omitempty"`
	MsgRate    *float64 `json:"msg_rate_mpps,omitempty"`
	BWUnit     string   `json:"bw_unit,omitempty"`
	Remote     bool     `json:"remote_report,omitempty"`
	TMin       *float64 `json:"t_min_usec,omitempty"`
	TMax       *float64 `json:"t_max_usec,omitempty"`
	TTypical   *float64 `json:"t_typical_usec,omitempty"`
	TAvg       *float64 `json:"t_avg_usec,omitempty"`
	TStdev     *float64 `json:"t_stdev_usec,omitempty"`
	P50        *float64 `json:"p50_usec,omitempty"`
	P99        *float64 `json:"p99_usec,omitempty"`
	P999       *float64 `json:"p99_9_usec,omitempty"`
	MaxAll     *float64 `json:"max_usec,omitempty"`
	TPS        *float64 `json:"tps,omitempty"`
	Verified   bool     `json:"verified,omitempty"`
}

// JSONReport is the JSON document of one side's report.
type JSONReport struct {
	Test       string `json:"test"`
	Side       string `json:"side"`
	Device     string `json:"device"`
	Path       string `json:"packet_path,omitempty"`
	Connection string `json:"connection"` // RC or UD
	// Bidirectional: both sides ran traffic (-b); a row is the sum of
	// both directions.
	Bidirectional bool         `json:"bidirectional,omitempty"`
	MTU           int          `json:"mtu"`
	QPs           int          `json:"qps"`
	PeerVersion   string       `json:"peer_version"`
	Local         []JSONDest   `json:"local"`
	Remote        []JSONDest   `json:"remote"`
	Results       []JSONResult `json:"results"`
	// Congestion is the soft device's congestion control during the run
	// (Outcome.Congestion); absent for other devices.
	Congestion *JSONCongestion `json:"congestion,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// JSONCongestion is Congestion in a JSON report, its mode by name.
type JSONCongestion struct {
	Mode string `json:"mode"`
	Congestion
}

// WriteJSON prints a side's report as one JSON document (`goroce bench
// --json`); runErr, when not nil, is reported in its error field.
func WriteJSON(w io.Writer, devName, path string, o Options, out *Outcome, runErr error) error {
	rep := JSONReport{Test: o.Test.String(), Side: "server", Device: devName, Path: path, MTU: out.MTU.Bytes(), QPs: max(o.QPs, 1), PeerVersion: out.PeerVersion}
	if o.Client {
		rep.Side = "client"
	}
	rep.Connection, rep.Bidirectional = "RC", o.Duplex
	if o.UD {
		rep.Connection = "UD"
	}
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	conv := func(ds []perftest.Dest) []JSONDest {
		r := []JSONDest{}
		for _, d := range ds {
			r = append(r, JSONDest{d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr, netip.AddrFrom16(d.GID).String()})
		}
		return r
	}
	rep.Local, rep.Remote = conv(out.Local), conv(out.Remote)
	if c := out.Congestion; c != nil {
		rep.Congestion = &JSONCongestion{Mode: c.Mode.String(), Congestion: *c}
	}
	rep.Results = []JSONResult{}
	f := func(v float64) *float64 { return &v }
	for _, r := range out.Results {
		j := JSONResult{Bytes: r.Size, Iterations: r.Iters, Verified: r.Verified}
		switch {
		case !o.Test.Lat:
			j.BWPeak, j.BWAverage, j.MsgRate, j.Remote = f(r.BWPeak), f(r.BWAvg), f(r.MsgRate), r.Remote
			j.BWUnit = "MB/sec"
			if o.Gbits {
				j.BWUnit = "Gb/sec"
			}
		case o.Duration > 0:
			j.TAvg, j.TPS = f(r.Avg), f(r.TPS)
		default:
			j.TMin, j.TMax, j.TTypical, j.TAvg, j.TStdev = f(r.Min), f(r.Max), f(r.Typical), f(r.Avg), f(r.Stdev)
			j.P50, j.P99, j.P999, j.MaxAll = f(r.P50), f(r.P99), f(r.P999), f(r.MaxAll)
		}
		rep.Results = append(rep.Results, j)
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(rep)
}
