package rls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/ratebucket/ratebucket/algo"
)

// ErrConfig reports a configuration that cannot be loaded. The error's
// text names the file and line, as in
//
//	limits/mongo.yaml:7: rate_limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
var ErrConfig = errors.New("rls: invalid configuration")

// ConfigError is one problem in a configuration file. It matches
// [ErrConfig] with errors.Is.
type ConfigError struct {
	File string // the file, as given to Load
	Line int    // 1-based; 0 when the problem is the file as a whole
	Msg  string
}

// Error returns "file:line: message".
func (e *ConfigError) Error() string {
	if e.Line == 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Is makes a ConfigError match ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Config is a loaded, validated configuration: one descriptor tree per
// domain. It is immutable once built, so requests share it without locks
// and a reload swaps in a new one.
type Config struct {
	domains map[string]*node
	files   []string
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// Lookup returns the limit a descriptor of domain matches, or nil: the
// matching ShouldRateLimit does, without the replaces of other
// descriptors in the same request.
func (c *Config) Lookup(domain string, d *rlpb.RateLimitDescriptor) *Limit {
	root := c.domains[domain]
	if root == nil || len(d.GetEntries()) == 0 {
		return nil
	}
	l, _ := root.lookup(d.Entries)
	return l
}

// Limit is one rate_limit block of the configuration.
type Limit struct {
	// Name and Replaces are the block's name and replaces names.
	Name     string
	Replaces []string
	// Unit and RequestsPerUnit are as written; Burst is the bucket's
	// capacity: burst when given, else RequestsPerUnit.
	Unit            pb.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	Burst           int64
	// Unlimited, Shadow and Quota are unlimited, shadow_mode and
	// quota_mode.
	Unlimited bool
	Shadow    bool
	Quota     bool
	// Lease is the descriptor's lease: true, a hot descriptor whose
	// bucket a Service with Options.Leases spends from leased batches
	// (see "Hot descriptors" in the package doc). Load refuses it on a
	// descriptor without a rate_limit of its own, on an unlimited one or
	// one of requests_per_unit 0 (nothing to lease), and beside
	// shadow_mode or quota_mode (whose refusals are reported, not
	// enforced: a batch would only hide them).
	Lease bool
	// Policy is the token bucket: Burst tokens, refilled at
	// RequestsPerUnit per Unit. Zero when Unlimited or RequestsPerUnit is
	// 0 (every request over the limit).
	Policy algo.Policy

	proto *pb.RateLimitResponse_RateLimit // current_limit in responses
}

// node is one descriptor of the tree: its limit and its children.
type node struct {
	limit     *Limit
	byValue   map[entry]*node // key and value
	byKey     map[string]*node
	wildcards []wildcard // values ending in '*', in file order
	// share is set on a wildcard node with share_threshold: every value
	// it matches shares one bucket, keyed by the pattern.
	share bool
}

type entry struct{ key, value string }

type wildcard struct {
	key, prefix string
	n           *node
}

// units maps a unit's name to its length, as envoyproxy/ratelimit counts
// them (a month is 30 days, a year 365).
var units = map[string]struct {
	unit pb.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	"second": {pb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {pb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {pb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {pb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {pb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {pb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {pb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength returns the length of a unit as sent by Envoy in a limit
// override, or 0 for an unknown one.
func unitLength(u pb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, v := range units {
		if v.unit == u {
			return v.d
		}
	}
	return 0
}

// Load reads the configuration at path: a YAML file, or a directory whose
// *.yaml and *.yml files (not in subdirectories) are read in name order.
// Each file holds one domain; a domain in two files is an error. Every
// problem is a [*ConfigError] naming the file and line.
func Load(path string) (*Config, error) {
	files := []string{path}
	if fi, err := os.Stat(path); err != nil {
		return nil, &ConfigError{File: path, Msg: err.Error()}
	} else if fi.IsDir() {
		files = nil
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, &ConfigError{File: path, Msg: err.Error()}
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
		if len(files) == 0 {
			return nil, &ConfigError{File: path, Msg: "no *.yaml or *.yml files"}
		}
	}
	c := &Config{domains: map[string]*node{}, files: files}
	where := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, &ConfigError{File: f, Msg: err.Error()}
		}
		domain, root, line, err := parse(f, data)
		if err != nil {
			return nil, err
		}
		if prev, dup := where[domain]; dup {
			return nil, &ConfigError{File: f, Line: line, Msg: fmt.Sprintf("domain %q is already defined at %s", domain, prev)}
		}
		where[domain] = fmt.Sprintf("%s:%d", f, line)
		c.domains[domain] = root
	}
	return c, nil
}

// Parse parses one file's contents; name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	domain, root, _, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	return &Config{domains: map[string]*node{domain: root}, files: []string{name}}, nil
}

// parser holds the file being parsed, for error positions, and what the
// whole domain must be checked for once it is read.
type parser struct {
	file    string
	named   map[string]bool // the names of the domain's rate_limits
	replace []replaceRef    // every replaces entry, checked against named
}

// replaceRef is one replaces entry: the name, where it is written and
// the descriptor whose rate_limit has it.
type replaceRef struct {
	name string
	at   *yaml.Node
	here string
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func parse(file string, data []byte) (domain string, root *node, line int, err error) {
	p := &parser{file: file, named: map[string]bool{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// yaml.v3's message already says "line N: ...".
		return "", nil, 0, &ConfigError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return "", nil, 0, p.errf(nil, "empty file")
	}
	top := doc.Content[0]
	root = &node{}
	var descs *yaml.Node
	err = p.fields(top, "the file", func(k string, v *yaml.Node) error {
		switch k {
		case "domain":
			line = v.Line
			return p.scalar(v, k, &domain)
		case "descriptors":
			descs = v
			return nil
		}
		return errUnknown
	})
	if err != nil {
		return "", nil, 0, err
	}
	if domain == "" {
		return "", nil, 0, p.errf(top, "the file has no domain (or an empty one)")
	}
	if descs != nil {
		if err := p.descriptors(descs, root, domain); err != nil {
			return "", nil, 0, err
		}
	}
	// A replaces entry applies to the limits of the same request's
	// descriptors, all in this domain: a name no rate_limit of the domain
	// has can never replace anything (a typo, or a renamed limit).
	for _, r := range p.replace {
		if !p.named[r.name] {
			return "", nil, 0, p.errf(r.at, "%s: rate_limit replaces %q, which no rate_limit of domain %q is named", r.here, r.name, domain)
		}
	}
	return domain, root, line, nil
}

var errUnknown = errors.New("unknown field")

// fields calls f for each key of the mapping n; f returns errUnknown for
// a key it does not know.
func (p *parser) fields(n *yaml.Node, what string, f func(k string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n, "%s must be a mapping", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return p.errf(k, "%q given twice", k.Value)
		}
		seen[k.Value] = true
		if err := f(k.Value, v); err == errUnknown {
			return p.errf(k, "unknown field %q in %s", k.Value, what)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// scalar decodes a scalar node into v (a *string, *bool, *uint32 or
// *int64), naming field k in errors.
func (p *parser) scalar(n *yaml.Node, k string, v any) error {
	if n.Kind != yaml.ScalarNode {
		return p.errf(n, "%s must be a single value", k)
	}
	if err := n.Decode(v); err != nil {
		want := map[string]string{"*string": "a string", "*bool": "true or false", "*uint32": "a whole number from 0 to 4294967295", "*int64": "a whole number"}[fmt.Sprintf("%T", v)]
		return p.errf(n, "%s: %q is not %s", k, n.Value, want)
	}
	return nil
}

func (p *parser) descriptors(seq *yaml.Node, parent *node, path string) error {
	if seq.Kind != yaml.SequenceNode {
		return p.errf(seq, "descriptors must be a list")
	}
	for _, d := range seq.Content {
		if err := p.descriptor(d, parent, path); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) descriptor(d *yaml.Node, parent *node, path string) error {
	var (
		key, value                                        string
		rl, children, modeNode, leaseNode                 *yaml.Node
		shadow, quota, detailed, toMetric, sharing, lease bool
	)
	err := p.fields(d, "a descriptor", func(k string, v *yaml.Node) error {
		switch k {
		case "key":
			return p.scalar(v, k, &key)
		case "value":
			return p.scalar(v, k, &value)
		case "rate_limit":
			rl = v
			return nil
		case "descriptors":
			children = v
			return nil
		case "shadow_mode":
			modeNode = v
			return p.scalar(v, k, &shadow)
		case "quota_mode":
			modeNode = v
			return p.scalar(v, k, &quota)
		case "detailed_metric":
			return p.scalar(v, k, &detailed) // accepted; metrics never carry values
		case "value_to_metric":
			return p.scalar(v, k, &toMetric) // likewise
		case "share_threshold":
			return p.scalar(v, k, &sharing)
		case "lease":
			leaseNode = v
			return p.scalar(v, k, &lease)
		}
		return errUnknown
	})
	if err != nil {
		return err
	}
	if key == "" {
		return p.errf(d, "descriptor has no key (or an empty one)")
	}
	here := path + "." + key
	if value != "" {
		here += "_" + value
	}
	n := &node{share: sharing}
	prefix, isWild := strings.CutSuffix(value, "*")
	switch {
	case sharing && !isWild:
		return p.errf(d, "%s: share_threshold needs a wildcard value ending in '*', not %q", here, value)
	case isWild:
		for _, w := range parent.wildcards {
			if w.key == key && w.prefix == prefix {
				return p.errf(d, "duplicate descriptor %s", here)
			}
		}
		parent.wildcards = append(parent.wildcards, wildcard{key, prefix, n})
	case value != "":
		if parent.byValue == nil {
			parent.byValue = map[entry]*node{}
		}
		if parent.byValue[entry{key, value}] != nil {
			return p.errf(d, "duplicate descriptor %s", here)
		}
		parent.byValue[entry{key, value}] = n
	default:
		if parent.byKey == nil {
			parent.byKey = map[string]*node{}
		}
		if parent.byKey[key] != nil {
			return p.errf(d, "duplicate descriptor %s", here)
		}
		parent.byKey[key] = n
	}
	// shadow_mode and quota_mode report the refusals of this
	// descriptor's own rate_limit instead of enforcing them: nested
	// descriptors do not inherit them, and an unlimited limit refuses
	// nothing, so either there would never apply.
	mode := "shadow_mode"
	if quota {
		mode = "quota_mode"
	}
	if rl != nil {
		if n.limit, err = p.rateLimit(rl, here); err != nil {
			return err
		}
		n.limit.Shadow, n.limit.Quota = shadow, quota
		if (shadow || quota) && n.limit.Unlimited {
			return p.errf(modeNode, "%s: %s on an unlimited rate_limit, which refuses nothing", here, mode)
		}
	} else if shadow || quota {
		return p.errf(modeNode, "%s: %s without a rate_limit of its own (nested descriptors do not inherit it)", here, mode)
	}
	if lease {
		switch {
		case n.limit == nil:
			return p.errf(leaseNode, "%s: lease without a rate_limit of its own (nested descriptors do not inherit it)", here)
		case n.limit.Unlimited || n.limit.RequestsPerUnit == 0:
			return p.errf(leaseNode, "%s: lease on a rate_limit that keeps no bucket (unlimited, or requests_per_unit 0)", here)
		case shadow || quota:
			return p.errf(leaseNode, "%s: lease with %s, whose refusals are reported, not enforced: a batch would hide them", here, mode)
		}
		n.limit.Lease = true
	}
	if children != nil {
		return p.descriptors(children, n, here)
	}
	return nil
}

func (p *parser) rateLimit(rl *yaml.Node, here string) (*Limit, error) {
	l := &Limit{}
	var refs []replaceRef
	var unit string
	var unitNode, rpu, burst *yaml.Node
	err := p.fields(rl, "rate_limit", func(k string, v *yaml.Node) error {
		switch k {
		case "unit":
			unitNode = v
			return p.scalar(v, k, &unit)
		case "requests_per_unit":
			rpu = v
			return p.scalar(v, k, &l.RequestsPerUnit)
		case "burst":
			burst = v
			return p.scalar(v, k, &l.Burst)
		case "unlimited":
			return p.scalar(v, k, &l.Unlimited)
		case "name":
			return p.scalar(v, k, &l.Name)
		case "replaces":
			if v.Kind != yaml.SequenceNode {
				return p.errf(v, "replaces must be a list of {name: ...}")
			}
			for _, r := range v.Content {
				var name string
				if err := p.fields(r, "a replaces entry", func(k string, v *yaml.Node) error {
					if k != "name" {
						return errUnknown
					}
					return p.scalar(v, k, &name)
				}); err != nil {
					return err
				}
				if name == "" {
					return p.errf(r, "%s: replaces entry has no name", here)
				}
				refs = append(refs, replaceRef{name, r, here})
				l.Replaces = append(l.Replaces, name)
			}
			return nil
		}
		return errUnknown
	})
	if err != nil {
		return nil, err
	}
	if l.Name != "" {
		if i := slices.Index(l.Replaces, l.Name); i >= 0 {
			return nil, p.errf(refs[i].at, "%s: rate_limit %q replaces itself", here, l.Name)
		}
		p.named[l.Name] = true
	}
	p.replace = append(p.replace, refs...)
	u, known := units[strings.ToLower(unit)]
	switch {
	case l.Unlimited && unit != "":
		return nil, p.errf(rl, "%s: an unlimited rate_limit takes no unit", here)
	case l.Unlimited && (rpu != nil || burst != nil):
		return nil, p.errf(rl, "%s: an unlimited rate_limit takes no requests_per_unit or burst", here)
	case l.Unlimited:
		return l, nil
	case unit == "":
		return nil, p.errf(rl, "%s: rate_limit has no unit (second, minute, hour, day, week, month or year)", here)
	case !known:
		return nil, p.errf(unitNode, "%s: rate_limit: unknown unit %q (want second, minute, hour, day, week, month or year)", here, unit)
	case rpu == nil:
		return nil, p.errf(rl, "%s: rate_limit has no requests_per_unit", here)
	case burst != nil && l.RequestsPerUnit == 0:
		return nil, p.errf(burst, "%s: burst with requests_per_unit 0 (which refuses every request)", here)
	}
	l.Unit = u.unit
	l.proto = &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: u.unit}
	if l.RequestsPerUnit == 0 {
		return l, nil
	}
	if burst == nil {
		l.Burst = int64(l.RequestsPerUnit)
	}
	pol, err := algo.NewPolicy(l.Burst, algo.Per(int64(l.RequestsPerUnit), u.d))
	if err != nil {
		at := rpu
		if burst != nil {
			at = burst
		}
		return nil, p.errf(at, "%s: %d per %s with a burst of %d is not a valid token bucket: %v", here, l.RequestsPerUnit, unit, l.Burst, err)
	}
	l.Policy = pol
	return l, nil
}
