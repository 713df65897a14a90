package rls_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestConfigsHonoured is issue 28's property for the rls server: a
// configuration Load accepts is one the server can honour. It generates
// configuration directories (one to three files, a domain each, the same
// domain twice now and then) of nested descriptors with keys, values and
// wildcards, share_threshold, shadow_mode, quota_mode, detailed_metric, lease,
// and rate_limits with every unit, requests_per_unit from 0 to
// 4294967295, burst (0, small, above the largest capacity), unlimited,
// name and replaces; now and then an option is wrong. A configuration
// Load refuses must be a *ConfigError at a line, naming its domain. Each
// one it accepts is swapped into a running server (a real gRPC server on
// 127.0.0.1, as Envoy calls it) and sent requests: descriptors that walk
// the configured tree (wildcards and key-only entries filled in) or match
// nothing, in a configured domain or an unknown one, with hits_addend on
// the request and the descriptor (0, small, above every burst, the
// largest uint64), is_negative_hits, and Envoy's limit overrides (valid
// and not), while a manual clock moves on. Every request must then be
// answered, a status per descriptor: no error at all, since the store is
// up and no input error may reach it. On memstore and on a real
// redis-server (the manual clock as redisstore's client clock).
func TestConfigsHonoured(t *testing.T) {
	for _, b := range []backend{memory, onRedis(t)} {
		t.Run(b.name, func(t *testing.T) {
			clk := storetest.NewClock()
			st, _ := b.open(t, clk)
			empty, err := rls.Parse("empty.yaml", []byte("domain: none\n"))
			if err != nil {
				t.Fatal(err)
			}
			src := &swapSource{}
			src.c.Store(empty)
			leases := &hybrid.LeasesConfig{Instances: 2, Lifetime: 2 * time.Second, MinBatch: 1, SweepEvery: -1, Clock: clk}
			r := serve(t, src, rls.Options{Store: st, Clock: clk, ResponseHeaders: true, Leases: leases}, nil)
			dir := t.TempDir()
			var accepted, refused, requests int
			rapid.Check(t, func(rt *rapid.T) {
				files := genHonourFiles(rt)
				sub := filepath.Join(dir, strconv.Itoa(accepted+refused))
				if err := os.Mkdir(sub, 0o755); err != nil {
					rt.Fatal(err)
				}
				domainOf := map[string]string{}
				for i, f := range files {
					name := filepath.Join(sub, fmt.Sprintf("f%d.yaml", i))
					domainOf[name] = f.domain
					if err := os.WriteFile(name, []byte(f.yaml()), 0o644); err != nil {
						rt.Fatal(err)
					}
				}
				cfg, err := rls.Load(sub)
				if err != nil {
					var ce *rls.ConfigError
					if !errors.As(err, &ce) || !errors.Is(err, rls.ErrConfig) || ce.Line == 0 || !strings.Contains(ce.Msg, domainOf[ce.File]) {
						rt.Fatalf("Load refused with %v; want a *ConfigError at a line naming the file's domain", err)
					}
					refused++
					return
				}
				accepted++
				src.c.Store(cfg)
				for i := range rapid.IntRange(1, 8).Draw(rt, "requests") {
					req := genHonourRequest(rt, files)
					resp, err := r.client.ShouldRateLimit(rt.Context(), req)
					requests++
					if err != nil {
						rt.Fatalf("request %d (%v): %v", i, req, err)
					}
					if len(resp.Statuses) != len(req.Descriptors) || resp.OverallCode == pb.RateLimitResponse_UNKNOWN {
						rt.Fatalf("request %d (%v): %v; want a status per descriptor and an overall code", i, req, resp)
					}
					clk.Add(rapid.SampledFrom([]time.Duration{0, 300 * time.Millisecond, 5 * time.Second, time.Hour, 26 * time.Hour}).Draw(rt, "advance"))
				}
			})
			t.Logf("%d configurations accepted, %d refused; %d requests", accepted, refused, requests)
			if accepted == 0 || refused == 0 {
				t.Fatalf("%d accepted, %d refused: the generator must make both", accepted, refused)
			}
			if n := counter(t, r, "ratebucket_rls_store_errors_total"); n != 0 {
				t.Fatalf("store errors counted: %v, want 0", n)
			}
		})
	}
}

// swapSource is a ConfigSource whose configuration the test replaces.
type swapSource struct{ c atomic.Pointer[rls.Config] }

func (s *swapSource) Config() *rls.Config { return s.c.Load() }

// hFile is a generated configuration file: a domain and its descriptors.
type hFile struct {
	domain string
	descs  []*hDesc
}

// hDesc is a generated descriptor.
type hDesc struct {
	key, value                     string
	limit                          *hLimit // nil: no rate_limit
	shadow, quota, share, detailed bool
	lease                          bool
	children                       []*hDesc
}

// hLimit is a generated rate_limit; a nil field is not written.
type hLimit struct {
	unit       *string
	rpu, burst *int64
	unlimited  bool
	name       string
	replaces   []string
}

// rare reports true about once in 24 draws: rapid draws the ends of a
// range often, a value inside it seldom.
func rare(t *rapid.T, label string) bool { return rapid.IntRange(0, 23).Draw(t, label) == 13 }

// genHonourFiles draws one to three files. Each option is wrong now and
// then (rare), so that about half the configurations load.
func genHonourFiles(t *rapid.T) []hFile {
	files := make([]hFile, rapid.IntRange(1, 3).Draw(t, "files"))
	for i := range files {
		files[i].domain = fmt.Sprintf("d%d", i)
		if i > 0 && rare(t, "sameDomain") {
			files[i].domain = files[0].domain
		}
		files[i].descs = genDescs(t, 1)
	}
	return files
}

// genDescs draws the descriptors of one level, depth 1 to 3.
func genDescs(t *rapid.T, depth int) []*hDesc {
	var ds []*hDesc
	seen := map[string]bool{}
	for range rapid.IntRange(0, 3).Draw(t, "descs") {
		d := &hDesc{
			key:   rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key"),
			value: rapid.SampledFrom([]string{"", "", "x", "y", "x*", "*"}).Draw(t, "value"),
		}
		if seen[d.key+"_"+d.value] && !rare(t, "duplicate") {
			continue
		}
		seen[d.key+"_"+d.value] = true
		wild := strings.HasSuffix(d.value, "*")
		d.share = wild && rapid.Bool().Draw(t, "share") || rare(t, "shareNotWild")
		d.detailed = rapid.Bool().Draw(t, "detailed")
		if depth < 3 && rapid.IntRange(0, 2).Draw(t, "nested") == 0 {
			d.children = genDescs(t, depth+1)
		}
		if len(d.children) == 0 || rapid.Bool().Draw(t, "limitToo") {
			d.limit = genLimit(t)
		}
		if d.limit != nil && !d.limit.unlimited || rare(t, "modeWithoutLimit") {
			d.shadow = rapid.IntRange(0, 4).Draw(t, "shadow") == 0
			d.quota = rapid.IntRange(0, 4).Draw(t, "quota") == 0
		}
		if d.limit != nil && !d.shadow && !d.quota || rare(t, "leaseWrong") {
			d.lease = rapid.IntRange(0, 2).Draw(t, "lease") == 0
		}
		ds = append(ds, d)
	}
	return ds
}

// genLimit draws a rate_limit.
func genLimit(t *rapid.T) *hLimit {
	l := &hLimit{
		name:      rapid.SampledFrom([]string{"", "", "n1", "n2"}).Draw(t, "name"),
		unlimited: rapid.IntRange(0, 5).Draw(t, "unlimited") == 3,
	}
	if !l.unlimited || rare(t, "unlimitedWithUnit") {
		u := rapid.SampledFrom([]string{"second", "minute", "hour", "day", "week", "month", "year", "MINUTE"}).Draw(t, "unit")
		if rare(t, "badUnit") {
			u = rapid.SampledFrom([]string{"fortnight", ""}).Draw(t, "unit")
		}
		l.unit = &u
	}
	if !l.unlimited && !rare(t, "noRPU") || l.unlimited && rare(t, "unlimitedWithRPU") {
		// 52127 a day or more is too long a fill for the exact math; more
		// than 10^9 a second too fast.
		rpu := rapid.SampledFrom([]int64{0, 1, 5, 60, 1000}).Draw(t, "rpu")
		if rare(t, "hugeRPU") {
			rpu = rapid.SampledFrom([]int64{52127, math.MaxUint32}).Draw(t, "rpu")
		}
		l.rpu = &rpu
	}
	if rapid.IntRange(0, 3).Draw(t, "burst") == 2 && (l.rpu != nil && *l.rpu > 0 || rare(t, "burstWithout")) {
		b := rapid.SampledFrom([]int64{1, 10, 100}).Draw(t, "burstOf")
		if rare(t, "badBurst") {
			b = rapid.SampledFrom([]int64{0, 1e13}).Draw(t, "burstOf")
		}
		l.burst = &b
	}
	if rapid.IntRange(0, 3).Draw(t, "replaces") == 2 {
		name := "n1"
		if l.name == name {
			name = "n2"
		}
		if rare(t, "replacesTypo") {
			name = rapid.SampledFrom([]string{"typo", l.name}).Draw(t, "replacesName")
		}
		l.replaces = append(l.replaces, name)
	}
	return l
}

// yaml renders f.
func (f hFile) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %q\n", f.domain)
	writeDescs(&b, f.descs, "")
	return b.String()
}

func writeDescs(b *strings.Builder, ds []*hDesc, indent string) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintf(b, "%sdescriptors:\n", indent)
	for _, d := range ds {
		in := indent + "    "
		fmt.Fprintf(b, "%s  - key: %q\n", indent, d.key)
		if d.value != "" {
			fmt.Fprintf(b, "%svalue: %q\n", in, d.value)
		}
		for _, o := range []struct {
			name string
			on   bool
		}{{"share_threshold", d.share}, {"shadow_mode", d.shadow}, {"quota_mode", d.quota}, {"detailed_metric", d.detailed}, {"lease", d.lease}} {
			if o.on {
				fmt.Fprintf(b, "%s%s: true\n", in, o.name)
			}
		}
		if l := d.limit; l != nil {
			fmt.Fprintf(b, "%srate_limit:\n", in)
			if l.unit != nil {
				fmt.Fprintf(b, "%s  unit: %q\n", in, *l.unit)
			}
			if l.rpu != nil {
				fmt.Fprintf(b, "%s  requests_per_unit: %d\n", in, *l.rpu)
			}
			if l.burst != nil {
				fmt.Fprintf(b, "%s  burst: %d\n", in, *l.burst)
			}
			if l.unlimited {
				fmt.Fprintf(b, "%s  unlimited: true\n", in)
			}
			if l.name != "" {
				fmt.Fprintf(b, "%s  name: %q\n", in, l.name)
			}
			if len(l.replaces) > 0 {
				fmt.Fprintf(b, "%s  replaces:\n", in)
				for _, r := range l.replaces {
					fmt.Fprintf(b, "%s    - name: %q\n", in, r)
				}
			}
		}
		writeDescs(b, d.children, in)
	}
}

// genHonourRequest draws a request to one of files' domains, or to an
// unknown one: one to three descriptors, each a path down a file's tree
// (its values filled in where the configuration has a wildcard or none)
// or entries that match nothing, with hits_addend, is_negative_hits and
// limit overrides now and then.
func genHonourRequest(t *rapid.T, files []hFile) *pb.RateLimitRequest {
	f := rapid.SampledFrom(files).Draw(t, "file")
	req := &pb.RateLimitRequest{
		Domain:     f.domain,
		HitsAddend: rapid.SampledFrom([]uint32{0, 0, 1, 2, 5}).Draw(t, "hits"),
	}
	if rapid.IntRange(0, 9).Draw(t, "unknownDomain") == 0 {
		req.Domain = "unknown"
	}
	for range rapid.IntRange(1, 3).Draw(t, "descriptors") {
		d := &rlpb.RateLimitDescriptor{}
		level := f.descs
		for len(level) > 0 {
			n := rapid.SampledFrom(level).Draw(t, "entry")
			value := n.value
			switch {
			case value == "":
				value = rapid.SampledFrom([]string{"x", "y", "xq", "{tag}|=%"}).Draw(t, "anyValue")
			case strings.HasSuffix(value, "*"):
				value = strings.TrimSuffix(value, "*") + rapid.SampledFrom([]string{"", "1", "abc", strings.Repeat("v", 300)}).Draw(t, "suffix")
			}
			d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: n.key, Value: value})
			if len(n.children) == 0 || rapid.IntRange(0, 3).Draw(t, "stop") == 0 {
				break
			}
			level = n.children
		}
		if len(d.Entries) == 0 || rapid.IntRange(0, 7).Draw(t, "noise") == 0 {
			d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: "z", Value: "1"})
		}
		switch rapid.IntRange(0, 5).Draw(t, "descHits") {
		case 0:
			d.HitsAddend = wrapperspb.UInt64(rapid.SampledFrom([]uint64{0, 1, 3, 100, math.MaxUint64}).Draw(t, "descHitsOf"))
		case 1:
			d.IsNegativeHits = true
		}
		if rapid.IntRange(0, 7).Draw(t, "override") == 0 {
			d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: rapid.SampledFrom([]uint32{0, 1, 10, math.MaxUint32}).Draw(t, "overrideRPU"),
				Unit:            typepb.RateLimitUnit(rapid.IntRange(0, 7).Draw(t, "overrideUnit")),
			}
			if m := rapid.IntRange(0, 3).Draw(t, "multiplier"); m < 3 {
				d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(m) * 2)
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}
