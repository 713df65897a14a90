package rls_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// api is the configuration of the service tests: 10 a minute per client
// with a burst of 4, and a shadow limit per path.
const api = `domain: api
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 10
      burst: 4
  - key: path
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

func apiRig(t *testing.T, opt rls.Options) (*rig, *storetest.Clock) {
	t.Helper()
	cfg, err := rls.Parse("api.yaml", []byte(api))
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock()
	if opt.Store == nil {
		opt.Store, _ = memory.open(t, clk)
	}
	if opt.Clock == nil {
		opt.Clock = clk
	}
	return serve(t, cfg, opt, nil), clk
}

// TestBurstAndHits: the burst extension caps the bucket below
// requests_per_unit; hits_addend is the cost, a descriptor's own one wins,
// 0 on a descriptor peeks, and a cost above the burst is refused without
// charging.
func TestBurstAndHits(t *testing.T) {
	r, clk := apiRig(t, rls.Options{})
	a := &asker{t: t, r: r, domain: "api"}
	a.want("OK [OK/3]", d("client=a"))
	a.last = r.ask(t, "api", 2, desc("client=a"))
	if got := render(a.last); got != "OK [OK/1]" {
		t.Fatalf("hits_addend 2: %s", got)
	}
	a.wantD("OK [OK/1]", hits(desc("client=a"), 0))
	a.wantD("OVER_LIMIT [OVER_LIMIT/1]", hits(desc("client=a"), 5)) // above the burst of 4
	a.wait(0, 24*time.Second)                                       // the fill time: 4 at 10 a minute
	a.want("OK [OK/0]", d("client=a"))
	a.want("OVER_LIMIT [OVER_LIMIT/0]", d("client=a"))
	a.wait(0, 6*time.Second) // exact: one token every 6s
	clk.Add(6 * time.Second)
	a.want("OK [OK/0]", d("client=a"))
	// The same descriptor twice in one request costs twice.
	a.want("OK [OK/2 OK/2]", d("client=b"), d("client=b"))
}

// TestShadowModeReportsButAdmits: a shadow-mode refusal is OK for the
// request and counted as shadow_over_limit; it never keeps the enforced
// limits from being charged.
func TestShadowModeReportsButAdmits(t *testing.T) {
	r, _ := apiRig(t, rls.Options{})
	a := &asker{t: t, r: r, domain: "api"}
	a.want("OK [OK/3 OK/0]", d("client=a"), d("path=/x"))
	a.want("OK [OK/2 OK/0]", d("client=a"), d("path=/x"))
	a.want("OK [OK/1 OK/0]", d("client=a"), d("path=/x"))
	a.want("OK [-]", d("nothing=here"))
	a.last = r.ask(t, "other", 0, desc("client=a"))
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(`
# HELP ratebucket_rls_decisions_total Descriptors decided, by domain (a configured one, or unknown) and result.
# TYPE ratebucket_rls_decisions_total counter
ratebucket_rls_decisions_total{domain="api",result="no_limit"} 1
ratebucket_rls_decisions_total{domain="api",result="ok"} 4
ratebucket_rls_decisions_total{domain="api",result="shadow_over_limit"} 2
ratebucket_rls_decisions_total{domain="unknown",result="no_limit"} 1
# HELP ratebucket_rls_requests_total ShouldRateLimit calls by overall outcome: ok, over_limit or error.
# TYPE ratebucket_rls_requests_total counter
ratebucket_rls_requests_total{code="ok"} 5
`), "ratebucket_rls_decisions_total", "ratebucket_rls_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// TestResponseHeaders: with ResponseHeaders, the response carries the
// x-ratelimit-* and ratelimit headers of the tightest descriptor, and
// retry-after when refused: x-ratelimit-reset is the Unix second the
// bucket is full again, ratelimit's t the delta to it.
func TestResponseHeaders(t *testing.T) {
	r, _ := apiRig(t, rls.Options{ResponseHeaders: true})
	full := strconv.FormatInt(storetest.Start.Unix()+18, 10) // 3 tokens at 10 a minute
	resp := r.ask(t, "api", 3, desc("client=a"), hits(desc("client=b"), 1))
	wantHeaders(t, resp.ResponseHeadersToAdd, `x-ratelimit-limit=4 x-ratelimit-remaining=1 x-ratelimit-reset=`+full+` ratelimit="default";r=1;t=18`)
	resp = r.ask(t, "api", 2, desc("client=a"))
	wantHeaders(t, resp.ResponseHeadersToAdd, `x-ratelimit-limit=4 x-ratelimit-remaining=1 x-ratelimit-reset=`+full+` ratelimit="default";r=1;t=18 retry-after=6`)
	resp = r.ask(t, "api", 0, desc("nothing=here"))
	wantHeaders(t, resp.ResponseHeadersToAdd, "")
}

// TestRefusedTakeChargesNothingVisible: when one limit refuses a request
// taken atomically, a limit that would have admitted it is reported as a
// peek at its bucket sees it, tokens and duration_until_reset alike
// (algo.TokenBucket.Uncharged), not as if it had been charged: before,
// its reset was one token's refill (6s) too late.
func TestRefusedTakeChargesNothingVisible(t *testing.T) {
	const two = `domain: two
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 10
      burst: 4
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1
`
	cfg, err := rls.Parse("two.yaml", []byte(two))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []backend{memory, onRedis(t)} {
		t.Run(b.name, func(t *testing.T) {
			clk := storetest.NewClock()
			s, _ := b.open(t, clk)
			a := &asker{t: t, r: serve(t, cfg, rls.Options{Store: s, Clock: clk}, nil), domain: "two"}
			a.want("OK [OK/3 OK/0]", d("client=a"), d("user=u"))
			a.wait(0, 6*time.Second)
			a.want("OVER_LIMIT [OK/3 OVER_LIMIT/0]", d("client=a"), d("user=u"))
			a.wait(0, 6*time.Second) // as charged, it was 12s
			a.wantD("OK [OK/3]", hits(desc("client=a"), 0))
			a.wait(0, 6*time.Second)
		})
	}
}

func wantHeaders(t *testing.T, hs []*core.HeaderValue, want string) {
	t.Helper()
	var got []string
	for _, h := range hs {
		got = append(got, h.Key+"="+h.Value)
	}
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("headers %q, want %q", g, want)
	}
}

// TestLimitOverride: a descriptor's limit override (sent by Envoy) is
// applied on a bucket of its own.
func TestLimitOverride(t *testing.T) {
	r, _ := apiRig(t, rls.Options{})
	o := desc("client=a")
	o.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_HOUR}
	a := &asker{t: t, r: r, domain: "api"}
	a.wantD("OK [OK/1]", o)
	a.wantD("OK [OK/0]", o)
	a.wantD("OVER_LIMIT [OVER_LIMIT/0]", o)
	a.wait(0, 30*time.Minute)
	if l := a.last.Statuses[0].CurrentLimit; l.RequestsPerUnit != 2 || l.Unit != pb.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("current_limit %v, want the override", l)
	}
	a.want("OK [OK/3]", d("client=a")) // the configured bucket is untouched
}

// TestBadRequestsAndStoreFailure: a request without a domain or
// descriptors is InvalidArgument; a store that cannot decide makes the
// call Unavailable (Envoy's failure_mode_deny then decides), never
// OVER_LIMIT.
func TestBadRequestsAndStoreFailure(t *testing.T) {
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms.Close()
	r, _ := apiRig(t, rls.Options{Store: ms})
	for _, req := range []*pb.RateLimitRequest{{Descriptors: []*rlpb.RateLimitDescriptor{desc("client=a")}}, {Domain: "api"}} {
		if _, err := r.client.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: err = %v, want InvalidArgument", req, err)
		}
	}
	_, err = r.client.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{desc("client=a")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("closed store: err = %v, want Unavailable", err)
	}
	if n := counter(t, r, "ratebucket_rls_store_errors_total"); n != 1 {
		t.Fatalf("store errors counted: %v, want 1", n)
	}
}

// counter returns the sum of a counter family of the rig's registry.
func counter(t *testing.T, r *rig, name string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestStoreInputErrorIsInternal: a store that refuses the server's
// buckets as bad input (here a memstore whose MaxKeyLen is below the
// server's keys: store.ErrKeyTooLong, which store.IsInputError reports)
// makes the call Internal, the server's misconfiguration, and is not
// counted as a store error: the store is up, and Unavailable would tell
// Envoy's operator and retry policy that it is down.
func TestStoreInputErrorIsInternal(t *testing.T) {
	ms, err := memstore.New(memstore.Config{MaxKeyLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	r, _ := apiRig(t, rls.Options{Store: ms})
	_, err = r.client.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{desc("client=a")}})
	if status.Code(err) != codes.Internal {
		t.Fatalf("a key above the store's MaxKeyLen: err = %v, want Internal", err)
	}
	if n := counter(t, r, "ratebucket_rls_store_errors_total"); n != 0 {
		t.Fatalf("store errors counted: %v, want 0 (the store is up)", n)
	}
	if n := counter(t, r, "ratebucket_rls_requests_total"); n != 1 {
		t.Fatalf("requests counted: %v, want 1 (an error)", n)
	}
}
