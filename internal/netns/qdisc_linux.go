package netns

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// SetTBF replaces the root qdisc of device dev in the namespace with a token
// bucket filter (tc tbf): rateBits bits a second, a bucket of burst bytes
// and a queue of limit bytes, beyond which arriving packets are dropped.
// It is the shallow bottleneck of a best-effort switch port; on the link
// of a Router towards a host, every packet forwarded to that host crosses
// it. rateBits 0 removes it (the device's default qdisc again). It needs
// the tc command of iproute2 (see RequireTool) and returns an error
// matching ErrNotSupported without it.
func (ns *NS) SetTBF(dev string, rateBits uint64, burst, limit int) error {
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("netns: set tbf: tc: %w", ErrNotSupported)
	}
	if rateBits == 0 {
		_, err := ns.Exec("tc", "qdisc", "del", "dev", dev, "root")
		return err
	}
	if burst <= 0 || limit <= 0 {
		return fmt.Errorf("netns: set tbf: burst %d and limit %d bytes: want both > 0", burst, limit)
	}
	_, err := ns.Exec("tc", "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", strconv.FormatUint(rateBits, 10)+"bit", "burst", strconv.Itoa(burst), "limit", strconv.Itoa(limit))
	return err
}

// QdiscStats returns the counters of the root qdisc of device dev (tc -s
// qdisc show).
func (ns *NS) QdiscStats(dev string) (QdiscStats, error) {
	out, err := ns.Exec("tc", "-s", "qdisc", "show", "dev", dev)
	if err != nil {
		return QdiscStats{}, err
	}
	return parseQdiscStats(out)
}

// parseQdiscStats reads the root qdisc's lines of tc -s qdisc show:
//
//	qdisc tbf 8001: root refcnt 2 rate 500Mbit burst 32Kb lat 1.0ms
//	 Sent 1296 bytes 12 pkt (dropped 0, overlimits 0 requeues 0)
func parseQdiscStats(out []byte) (QdiscStats, error) {
	var s QdiscStats
	root := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(strings.NewReplacer("(", " ", ")", " ", ",", " ").Replace(sc.Text()))
		if len(f) >= 2 && f[0] == "qdisc" {
			root = false
			for _, w := range f {
				if w == "root" {
					root, s.Kind = true, f[1]
				}
			}
			continue
		}
		if !root || len(f) == 0 || f[0] != "Sent" {
			continue
		}
		for i := 0; i+1 < len(f); i++ {
			var p *uint64
			switch {
			case f[i] == "Sent":
				p = &s.SentBytes
			case f[i+1] == "pkt" && i > 0:
				n, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					return s, fmt.Errorf("netns: tc -s qdisc: %q: %w", sc.Text(), err)
				}
				s.SentPackets = n
				continue
			case f[i] == "dropped":
				p = &s.Dropped
			case f[i] == "overlimits":
				p = &s.Overlimits
			default:
				continue
			}
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return s, fmt.Errorf("netns: tc -s qdisc: %q: %w", sc.Text(), err)
			}
			*p = n
		}
		return s, nil
	}
	return s, fmt.Errorf("netns: no root qdisc counters in: %s", bytes.TrimSpace(out))
}

// ceTable is the nftables table SetCEMark uses for device dev.
func ceTable(dev string) string { return "goroce_ce_" + lossTable(dev)[len("goroce_loss_"):] }

// SetCEMark makes the namespace, a router, mark the ECN field CE
// (congestion experienced) of the ECN-capable UDP packets it forwards out
// of device dev once they come faster than pps packets a second beyond a
// burst of burst packets (an nftables rule on the forward hook: limit rate
// over, ip ecn set ce), replacing an earlier setting; pps 0 removes it.
// The rule's token bucket is a phantom queue (Alizadeh et al., "Less is
// More", NSDI 2012): set a little below a bottleneck's rate, it marks
// before the real queue fills, as a switch port's ECN threshold does, on
// kernels without RED, fq_codel or PIE (whose ecn options mark on the queue
// itself). The limit counts packets, not bytes: nftables' byte limits hold
// a second's worth of their rate (tokens_max = unit * (rate + burst) /
// rate), far deeper than any switch queue. It needs nft (see RequireTool)
// and returns an error matching ErrNotSupported without it.
func (ns *NS) SetCEMark(dev string, pps, burst int) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("netns: set CE mark: nft: %w", ErrNotSupported)
	}
	table := ceTable(dev)
	script := "add table ip " + table + "\ndelete table ip " + table + "\n"
	if pps > 0 {
		if burst <= 0 {
			return fmt.Errorf("netns: set CE mark: burst %d packets: want > 0", burst)
		}
		script += fmt.Sprintf("table ip %s {\n\tchain forward {\n\t\ttype filter hook forward priority mangle; policy accept;\n"+
			"\t\toifname %q meta l4proto udp ip ecn != not-ect limit rate over %d/second burst %d packets counter ip ecn set ce\n\t}\n}\n",
			table, dev, pps, burst)
	}
	_, err := ns.execInput([]byte(script), "nft", "-f", "-")
	return err
}

// CEMarked returns how many packets SetCEMark's rule on dev has marked.
func (ns *NS) CEMarked(dev string) (uint64, error) {
	out, err := ns.Exec("nft", "list", "table", "ip", ceTable(dev))
	if err != nil {
		return 0, err
	}
	return parseCounter(out)
}

// parseCounter returns the packets of the first nftables counter in out.
func parseCounter(out []byte) (uint64, error) {
	const key = "counter packets "
	i := bytes.Index(out, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("netns: no counter in: %s", out)
	}
	num := out[i+len(key):]
	if j := bytes.IndexByte(num, ' '); j >= 0 {
		num = num[:j]
	}
	return strconv.ParseUint(string(num), 10, 64)
}
