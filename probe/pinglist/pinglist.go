package pinglist

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Class names, the values of Target.Class and of the class label.
const (
	ClassToRMesh  = "tor_mesh"
	ClassInterToR = "inter_tor"
	ClassStatic   = "static"
)

// Defaults of the settings and classes, applied to every value the file
// leaves out (or sets to zero).
const (
	DefaultTimeout      = time.Second
	DefaultPaths        = 16
	DefaultProbability  = 0.99
	DefaultHTTPPort     = 9478
	DefaultWindow       = 30 * time.Second
	DefaultMaxLoss      = 0.01
	DefaultMaxP99RTT    = 5 * time.Millisecond
	DefaultMinProbes    = 20
	DefaultMaxPairs     = 256
	DefaultResponderQPs = 1
	DefaultRate         = 10.0
	DefaultStaticRate   = 1.0
	DefaultSample       = 16
	DefaultMaxClassRate = 2000.0
	// DefaultDSCP is the DSCP of the probes of every class and of the
	// ACKs: 26 (AF31), the lossless RoCE class of common RoCE deployments
	// (traffic class 106 with ECN's ECT(0) set, which the device adds).
	DefaultDSCP = 26
	// MaxLabels bounds the flow labels per target, whatever Paths and
	// Probability ask for (N=32, P=0.99 needs 255).
	MaxLabels = 1024
)

// Errors. Every validation error wraps ErrInvalid and names the node,
// target or field at fault.
var (
	ErrInvalid = errors.New("pinglist: invalid pinglist")
)

// Settings are the fleet-wide knobs every agent takes from the pinglist.
type Settings struct {
	// Timeout after which a probe is lost (default 1 s).
	Timeout time.Duration
	// Paths is the number of equal-cost paths N to cover between two
	// hosts (default 16), Probability the chance P to cover all of them
	// (default 0.99). Labels is the number of flow labels each target is
	// probed with: the file's `labels` if given, otherwise the smallest k
	// that covers N paths with probability P (coupon collector: N=16,
	// P=0.99 gives 115).
	Paths       int
	Probability float64
	Labels      int
	// HTTPPort is the agent's HTTP port: /metrics, /probe/v1/self and its
	// pages (default 9478).
	HTTPPort int
	// Window is the analysis's sliding window (default 30 s).
	Window time.Duration
	// MaxLoss is the loss ratio above which a path is degraded (default
	// 0.01), MaxP99RTT the network RTT p99 above which it is (default
	// 5 ms), MinProbes the probes a window needs before a path is judged
	// at all (default 20).
	MaxLoss   float64
	MaxP99RTT time.Duration
	MinProbes int
	// MaxPairs caps the per-target metric series of one agent (default
	// 1000); beyond it results aggregate into target="other".
	MaxPairs int
	// PairHistograms gives every target (up to MaxPairs) RTT and delay
	// histograms of its own; false (the default) keeps them per target
	// group (ToR), about 80 series a group instead of a target: a fleet
	// of 1,000 nodes in 25 groups exposes a third of the series.
	PairHistograms bool
	// ResponderQPs is the number of UD QPs each responder opens (default
	// 1); several help fabrics that hash on the destination QPN.
	ResponderQPs int
	// RailPairs says which rails of multi-rail nodes probe each other:
	// RailPairsSame (the default) pairs a rail only with the peers' rails
	// of the same name, as rail-optimised fabrics route; RailPairsAll
	// pairs every rail with every other node's every rail.
	RailPairs string
}

// Values of Settings.RailPairs.
const (
	RailPairsSame = "same"
	RailPairsAll  = "all"
)

// Class is the configuration of one class of targets.
type Class struct {
	// Enabled is false when the file says `enabled: false`.
	Enabled bool
	// Rate is the probes per second sent to each target of the class
	// (default 10; 1 for static targets without a rate of their own).
	Rate float64
	// MaxRate caps the probes per second of the whole class on one agent
	// (default 2000): when the targets' rates add up to more, every
	// target's rate is scaled down by the same factor.
	MaxRate float64
	// Sample is, for inter_tor, the number of targets in other groups
	// each node probes (default 16), Seed the seed of the hash that
	// chooses them.
	Sample int
	Seed   uint64
	// DSCP is the DSCP (0 to 63) of the class's probes (default
	// DefaultDSCP): the probes travel in the traffic class they measure.
	DSCP int
}

// Node is one host of the fleet: an agent that probes and answers.
type Node struct {
	// Name identifies the node (unique); Addr is its IP address
	// (unique), where its responder and HTTP server are.
	Name string
	Addr netip.Addr
	// Group is its group, the ToR it hangs under ("" for nodes the file
	// puts in no group; they form one group together).
	Group string
	// Host and Rail are set on the rails of a multi-rail node: each rail
	// is a Node of its own, named "<host>/<rail>", with its own address
	// and group (its ToR), on the RDMA device Device (its GID index
	// GIDIndex) when the file names one. A node of one address has
	// neither (HostName is its Name).
	Host     string
	Rail     string
	Device   string
	GIDIndex int
}

// HostName is the host the node is on: Host for a rail, Name otherwise.
func (n Node) HostName() string {
	if n.Host != "" {
		return n.Host
	}
	return n.Name
}

// RailSep separates a multi-rail node's name from its rail's in the rail's
// Node.Name ("host-a1/rail1"). Node names may not contain it.
const RailSep = "/"

// Target is one peer a node probes, and how often.
type Target struct {
	Node Node
	// Class is the class that made it a target (ClassToRMesh,
	// ClassInterToR, ClassStatic).
	Class string
	// Rate is the probes per second to send to it, after the class cap.
	Rate float64
}

// List is a parsed and validated pinglist. It is read-only after Parse and
// safe for concurrent use.
type List struct {
	Settings Settings
	// Classes by name: ClassToRMesh, ClassInterToR and ClassStatic are
	// always present (possibly disabled).
	Classes map[string]Class
	// Nodes in file order; Static the static targets in file order (their
	// Group is "" when the file gives none, Name the address when it
	// gives none).
	Nodes  []Node
	Static []StaticTarget

	byAddr map[netip.Addr]int32
	// groups: the group names sorted, and each group's nodes (indices into
	// Nodes) sorted by name.
	groupNames []string
	groupNodes [][]int32
	groupIndex map[string]int32
}

// StaticTarget is a target every agent probes, whether or not it runs an
// agent itself (a storage box, a gateway).
type StaticTarget struct {
	Node Node
	// Rate is its own rate, or the static class's rate.
	Rate float64
}

// file is the YAML schema (see the package documentation).
type file struct {
	Settings struct {
		Timeout      time.Duration `yaml:"timeout"`
		Paths        int           `yaml:"paths"`
		Probability  float64       `yaml:"probability"`
		Labels       int           `yaml:"labels"`
		HTTPPort     int           `yaml:"http_port"`
		Window       time.Duration `yaml:"window"`
		ResponderQPs int           `yaml:"responder_qps"`
		RailPairs    string        `yaml:"rail_pairs"`
		MaxPairs     int           `yaml:"max_pairs"`
		PairHist     bool          `yaml:"pair_histograms"`
		SLA          struct {
			MaxLoss   *float64      `yaml:"max_loss"`
			MaxP99RTT time.Duration `yaml:"max_p99_rtt"`
			MinProbes int           `yaml:"min_probes"`
		} `yaml:"sla"`
	} `yaml:"settings"`
	Classes map[string]fileClass `yaml:"classes"`
	Nodes   []fileNode           `yaml:"nodes"`
	Static  []fileStatic         `yaml:"static"`
}

type fileClass struct {
	Enabled *bool    `yaml:"enabled"`
	Rate    *float64 `yaml:"rate"`
	MaxRate *float64 `yaml:"max_rate"`
	Sample  *int     `yaml:"sample"`
	DSCP    *int     `yaml:"dscp"`
	Seed    uint64   `yaml:"seed"`
}

type fileNode struct {
	Name  string     `yaml:"name"`
	Addr  string     `yaml:"addr"`
	Group string     `yaml:"group"`
	Rails []fileRail `yaml:"rails"`
}

type fileRail struct {
	Name     string `yaml:"name"`
	Addr     string `yaml:"addr"`
	Group    string `yaml:"group"`
	Device   string `yaml:"device"`
	GIDIndex int    `yaml:"gid_index"`
}

type fileStatic struct {
	Name  string   `yaml:"name"`
	Addr  string   `yaml:"addr"`
	Group string   `yaml:"group"`
	Rate  *float64 `yaml:"rate"`
}

// Load reads and parses the pinglist file at path.
func Load(path string) (*List, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pinglist: %w", err)
	}
	l, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// Parse parses and validates a pinglist. Unknown fields and unknown
// classes are errors, so that a typo does not silently fall back to a
// default.
func Parse(b []byte) (*List, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return build(&f)
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// build turns the decoded file into a List: the settings and classes with
// their defaults, the nodes, the static targets and the groups, checking
// each on the way.
func build(f *file) (*List, error) {
	l := &List{Classes: make(map[string]Class, 3)}
	if err := buildSettings(&l.Settings, f); err != nil {
		return nil, err
	}
	if err := l.buildClasses(f.Classes); err != nil {
		return nil, err
	}
	l.Nodes = make([]Node, 0, len(f.Nodes))
	l.byAddr = make(map[netip.Addr]int32, len(f.Nodes)+len(f.Static))
	names := make(map[string]int, len(f.Nodes)+len(f.Static))
	if err := l.addNodes(f.Nodes, names); err != nil {
		return nil, err
	}
	if err := l.addStatic(f.Static, names); err != nil {
		return nil, err
	}
	l.buildGroups()
	return l, nil
}

// buildSettings fills s from the file's settings, with the defaults for
// every value the file leaves out, and checks them. Labels, when the file
// gives none, is the smallest count that covers the paths with the
// probability asked for, capped at MaxLabels.
func buildSettings(s *Settings, f *file) error {
	fs := &f.Settings
	s.Timeout = orDuration(fs.Timeout, DefaultTimeout)
	s.Paths = orInt(fs.Paths, DefaultPaths)
	s.Probability = fs.Probability
	if s.Probability == 0 {
		s.Probability = DefaultProbability
	}
	s.HTTPPort = orInt(fs.HTTPPort, DefaultHTTPPort)
	s.Window = orDuration(fs.Window, DefaultWindow)
	s.ResponderQPs = orInt(fs.ResponderQPs, DefaultResponderQPs)
	s.MaxPairs = orInt(fs.MaxPairs, DefaultMaxPairs)
	s.PairHistograms = fs.PairHist
	s.RailPairs = fs.RailPairs
	if s.RailPairs == "" {
		s.RailPairs = RailPairsSame
	}
	s.MaxLoss = DefaultMaxLoss
	if fs.SLA.MaxLoss != nil {
		s.MaxLoss = *fs.SLA.MaxLoss
	}
	s.MaxP99RTT = orDuration(fs.SLA.MaxP99RTT, DefaultMaxP99RTT)
	s.MinProbes = orInt(fs.SLA.MinProbes, DefaultMinProbes)
	if err := checkSettings(s, fs.Labels); err != nil {
		return err
	}
	s.Labels = fs.Labels
	if s.Labels == 0 {
		s.Labels = min(labelCount(s.Paths, s.Probability), MaxLabels)
	}
	return nil
}

// checkSettings returns an error naming the first setting of s out of its
// range, or labels (the file's settings.labels, 0 when it gives none) when
// it is not in [0, MaxLabels]; nil when all are valid.
func checkSettings(s *Settings, labels int) error {
	switch {
	case s.Timeout < 0:
		return invalid("settings.timeout %v is negative", s.Timeout)
	case s.Paths < 1 || s.Paths > 256:
		return invalid("settings.paths %d is not in [1, 256]", s.Paths)
	case !(s.Probability > 0 && s.Probability < 1):
		return invalid("settings.probability %v is not in (0, 1)", s.Probability)
	case s.HTTPPort < 1 || s.HTTPPort > 65535:
		return invalid("settings.http_port %d is not a port", s.HTTPPort)
	case s.Window < time.Second:
		return invalid("settings.window %v is shorter than 1s", s.Window)
	case s.ResponderQPs < 1 || s.ResponderQPs > 64:
		return invalid("settings.responder_qps %d is not in [1, 64]", s.ResponderQPs)
	case s.MaxPairs < 1:
		return invalid("settings.max_pairs %d is not positive", s.MaxPairs)
	case !(s.MaxLoss >= 0 && s.MaxLoss <= 1):
		return invalid("settings.sla.max_loss %v is not in [0, 1]", s.MaxLoss)
	case s.MaxP99RTT < 0:
		return invalid("settings.sla.max_p99_rtt %v is negative", s.MaxP99RTT)
	case s.MinProbes < 1:
		return invalid("settings.sla.min_probes %d is not positive", s.MinProbes)
	case s.RailPairs != RailPairsSame && s.RailPairs != RailPairsAll:
		return invalid("settings.rail_pairs %q is not %s or %s", s.RailPairs, RailPairsSame, RailPairsAll)
	case labels < 0 || labels > MaxLabels:
		return invalid("settings.labels %d is not in [0, %d]", labels, MaxLabels)
	}
	return nil
}

// buildClasses fills l.Classes with the three classes, each from its
// entry in the file (if any) over the defaults. A class name the file
// gives that is none of the three is an error.
func (l *List) buildClasses(classes map[string]fileClass) error {
	for name := range classes {
		switch name {
		case ClassToRMesh, ClassInterToR, ClassStatic:
		default:
			return invalid("unknown class %q (the classes are %s, %s and %s)", name, ClassToRMesh, ClassInterToR, ClassStatic)
		}
	}
	for _, name := range []string{ClassToRMesh, ClassInterToR, ClassStatic} {
		c, err := buildClass(name, classes[name])
		if err != nil {
			return err
		}
		l.Classes[name] = c
	}
	return nil
}

// buildClass returns the class name as the file's entry fc configures it,
// with the defaults for what fc leaves out, and checks it.
func buildClass(name string, fc fileClass) (Class, error) {
	c := Class{Enabled: true, Rate: DefaultRate, MaxRate: DefaultMaxClassRate, Seed: fc.Seed, DSCP: DefaultDSCP}
	if fc.DSCP != nil {
		if *fc.DSCP < 0 || *fc.DSCP > 63 {
			return Class{}, invalid("classes.%s.dscp %d is not a DSCP (0 to 63)", name, *fc.DSCP)
		}
		c.DSCP = *fc.DSCP
	}
	if name == ClassStatic {
		c.Rate = DefaultStaticRate
	}
	if name == ClassInterToR {
		c.Sample = DefaultSample
	}
	if fc.Enabled != nil {
		c.Enabled = *fc.Enabled
	}
	if fc.Rate != nil {
		c.Rate = *fc.Rate
	}
	if fc.MaxRate != nil {
		c.MaxRate = *fc.MaxRate
	}
	if fc.Sample != nil {
		if name != ClassInterToR {
			return Class{}, invalid("classes.%s.sample: only %s takes a sample", name, ClassInterToR)
		}
		c.Sample = *fc.Sample
	}
	if !validRate(c.Rate) {
		return Class{}, invalid("classes.%s.rate %v is not a positive rate", name, c.Rate)
	}
	if !validRate(c.MaxRate) {
		return Class{}, invalid("classes.%s.max_rate %v is not a positive rate", name, c.MaxRate)
	}
	if c.Sample < 0 {
		return Class{}, invalid("classes.%s.sample %d is negative", name, c.Sample)
	}
	return c, nil
}

// addNodes appends the file's nodes to l.Nodes, a multi-rail node as one
// Node a rail, and indexes them by address in l.byAddr. It records every
// node name in names (with its index in nodes) so that the static targets
// can be checked against them; names and addresses must be unique.
func (l *List) addNodes(nodes []fileNode, names map[string]int) error {
	for i, fn := range nodes {
		if fn.Name == "" {
			return invalid("nodes[%d]: no name", i)
		}
		if strings.Contains(fn.Name, RailSep) {
			return invalid("node %q: a name may not contain %q (it separates a node's rails)", fn.Name, RailSep)
		}
		if j, dup := names[fn.Name]; dup {
			return invalid("node %q: duplicate name (also nodes[%d])", fn.Name, j)
		}
		names[fn.Name] = i
		rails, err := nodeRails(fn)
		if err != nil {
			return err
		}
		for _, n := range rails {
			if j, dup := l.byAddr[n.Addr]; dup {
				return invalid("node %q: duplicate address %s (also node %q)", n.Name, n.Addr, l.Nodes[j].Name)
			}
			l.byAddr[n.Addr] = int32(len(l.Nodes))
			l.Nodes = append(l.Nodes, n)
		}
	}
	return nil
}

// addStatic appends the file's static targets to l.Static, each with the
// static class's rate unless it gives its own. Their names and addresses
// may clash neither with each other nor with the nodes' (names holds the
// nodes' names; the targets' are added to it).
func (l *List) addStatic(static []fileStatic, names map[string]int) error {
	staticAddrs := make(map[netip.Addr]bool, len(static))
	for i, fs := range static {
		a, err := parseAddr(fs.Addr)
		if err != nil {
			return invalid("static[%d]: %v", i, err)
		}
		name := fs.Name
		if name == "" {
			name = a.String()
		}
		if _, dup := l.byAddr[a]; dup || staticAddrs[a] {
			return invalid("static target %q: duplicate address %s", name, a)
		}
		if _, dup := names[name]; dup || strings.Contains(name, RailSep) {
			return invalid("static target %q: duplicate name, or one with %q", name, RailSep)
		}
		staticAddrs[a] = true
		names[name] = -1
		rate := l.Classes[ClassStatic].Rate
		if fs.Rate != nil {
			rate = *fs.Rate
		}
		if !validRate(rate) {
			return invalid("static target %q: rate %v is not a positive rate", name, rate)
		}
		l.Static = append(l.Static, StaticTarget{Node: Node{Name: name, Addr: a, Group: fs.Group}, Rate: rate})
	}
	return nil
}

// buildGroups groups l.Nodes by their Group: the group names sorted, each
// group's nodes sorted by name, and the index of every group by name.
func (l *List) buildGroups() {
	l.groupIndex = make(map[string]int32)
	for i, n := range l.Nodes {
		g, ok := l.groupIndex[n.Group]
		if !ok {
			g = int32(len(l.groupNames))
			l.groupIndex[n.Group] = g
			l.groupNames = append(l.groupNames, n.Group)
			l.groupNodes = append(l.groupNodes, nil)
		}
		l.groupNodes[g] = append(l.groupNodes[g], int32(i))
	}
	order := make([]int, len(l.groupNames))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return l.groupNames[order[a]] < l.groupNames[order[b]] })
	gn := make([]string, len(order))
	gm := make([][]int32, len(order))
	for to, from := range order {
		gn[to] = l.groupNames[from]
		gm[to] = l.groupNodes[from]
		l.groupIndex[gn[to]] = int32(to)
		m := gm[to]
		sort.Slice(m, func(a, b int) bool { return l.Nodes[m[a]].Name < l.Nodes[m[b]].Name })
	}
	l.groupNames, l.groupNodes = gn, gm
}

// nodeRails returns the Nodes of one node of the file: itself, or one a
// rail when it lists rails.
func nodeRails(fn fileNode) ([]Node, error) {
	if len(fn.Rails) == 0 {
		a, err := parseAddr(fn.Addr)
		if err != nil {
			return nil, invalid("node %q: %v", fn.Name, err)
		}
		return []Node{{Name: fn.Name, Addr: a, Group: fn.Group}}, nil
	}
	if fn.Addr != "" {
		return nil, invalid("node %q: give its addresses in rails, not addr", fn.Name)
	}
	out := make([]Node, 0, len(fn.Rails))
	seen := make(map[string]bool, len(fn.Rails))
	for k, r := range fn.Rails {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("rail%d", k)
		}
		if strings.Contains(name, RailSep) || seen[name] {
			return nil, invalid("node %q: rails[%d]: bad or duplicate rail name %q", fn.Name, k, name)
		}
		seen[name] = true
		a, err := parseAddr(r.Addr)
		if err != nil {
			return nil, invalid("node %q: rail %q: %v", fn.Name, name, err)
		}
		if r.GIDIndex < 0 || r.GIDIndex > 255 {
			return nil, invalid("node %q: rail %q: gid_index %d is not in [0, 255]", fn.Name, name, r.GIDIndex)
		}
		g := r.Group
		if g == "" {
			g = fn.Group
		}
		out = append(out, Node{Name: fn.Name + RailSep + name, Addr: a, Group: g, Host: fn.Name, Rail: name, Device: r.Device, GIDIndex: r.GIDIndex})
	}
	return out, nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

func validRate(r float64) bool { return r > 0 && !math.IsInf(r, 0) && !math.IsNaN(r) }

func parseAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("no addr")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bad addr %q", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("bad addr %q: zones are not supported", s)
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("bad addr %q: not a unicast address", s)
	}
	return a.Unmap(), nil
}

// Self returns the node whose address is addr (IPv4-mapped IPv6
// addresses match their IPv4 form).
func (l *List) Self(addr netip.Addr) (Node, bool) {
	i, ok := l.byAddr[addr.Unmap()]
	if !ok {
		return Node{}, false
	}
	return l.Nodes[i], true
}

// Rails returns the nodes of host: its rails in file order, or the node
// itself when it has one address.
func (l *List) Rails(host string) []Node {
	var out []Node
	for _, n := range l.Nodes {
		if n.HostName() == host {
			out = append(out, n)
		}
	}
	return out
}

// Node returns the node named name.
func (l *List) Node(name string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Groups returns the group names, sorted.
func (l *List) Groups() []string { return append([]string(nil), l.groupNames...) }
