package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// ConfigSource gives the configuration in use. A [*Config] is its own
// source; a [*Loader] gives the latest good one.
type ConfigSource interface {
	Config() *Config
}

// Config returns c, so a fixed configuration is a ConfigSource.
func (c *Config) Config() *Config { return c }

// Options configures a [Service]. Store is required; the zero value of
// every other field works.
type Options struct {
	// Store keeps the buckets: a redisstore for a fleet of servers, a
	// memstore for a single one.
	Store store.Store
	// Cluster says that Store is a redisstore on Redis Cluster, where a
	// multi-bucket take needs every key in one slot: descriptors are
	// grouped by slot and the groups taken in order (see the package
	// documentation).
	Cluster bool
	// HashTag chooses the part of the bucket keys that is their Cluster
	// hash tag. Default: TagFirst.
	HashTag HashTag
	// Prefix starts every bucket key (after the redisstore's own prefix).
	// Default "rls:".
	Prefix string
	// ResponseHeaders adds rate-limit headers to every response that has
	// a limit, as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED
	// does: see HeaderLimit. Envoy adds them to the client's response.
	ResponseHeaders bool
	// Header names, defaults x-ratelimit-limit (the bucket's capacity),
	// x-ratelimit-remaining (whole tokens left) and x-ratelimit-reset (the
	// Unix time in seconds, rounded up, at which the bucket is full again,
	// as httplimit and grpclimit send it). Every such response also gets
	// the IETF draft's ratelimit, "name";r=remaining;t=seconds until full
	// (rounded up): t is the delta envoyproxy/ratelimit sends as
	// x-ratelimit-reset. An OVER_LIMIT response also gets retry-after
	// (seconds, rounded up, at least 1, until the request could pass).
	HeaderLimit, HeaderRemaining, HeaderReset string
	// Clock is read for x-ratelimit-reset only. Default: the real clock.
	Clock store.Clock
	// Metrics receives the decisions; nil keeps none.
	Metrics *Metrics
	// Logger receives store failures, at most one record a second.
	// Default slog.Default().
	Logger *slog.Logger
	// Leases, when set, spends the buckets of hot descriptors (those
	// configured with lease: true) from leased batches: NewService wraps
	// Store in hybrid.NewLeases(Store, *Leases), and each such
	// descriptor's bucket costs one Store call per batch instead of one
	// per request while its demand over a Lifetime reaches MinBatch (see
	// "Hot descriptors" in the package doc). Set Instances to the number
	// of servers sharing Store. NewService returns an error for a
	// LeasesConfig hybrid.NewLeases refuses (wrapping
	// hybrid.ErrInvalidConfig), and for a configuration with lease: true
	// descriptors when Leases is nil (a configuration reloaded later is
	// served with those descriptors unleased: a Loader knows no Service).
	// Call [Service.Close] when the server stops. Default: nil, every
	// descriptor is a Store call.
	Leases *hybrid.LeasesConfig
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// Service implements envoy.service.ratelimit.v3.RateLimitService. It is
// safe for simultaneous use by multiple goroutines.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	src     ConfigSource
	opt     Options
	metrics *Metrics
	logger  *slog.Logger
	logged  logEvery
	clock   store.Clock
	leases  *hybrid.Leases // over opt.Store, when opt.Leases is set
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// NewService returns a Service deciding with the configuration src gives
// at each request.
func NewService(src ConfigSource, opt Options) (*Service, error) {
	if src == nil || opt.Store == nil {
		return nil, errors.New("rls: NewService needs a ConfigSource and a Store")
	}
	if opt.Prefix == "" {
		opt.Prefix = "rls:"
	}
	if len(opt.Prefix) > 32 {
		return nil, fmt.Errorf("rls: Prefix of %d bytes, at most 32", len(opt.Prefix))
	}
	if opt.HeaderLimit == "" {
		opt.HeaderLimit = "x-ratelimit-limit"
	}
	if opt.HeaderRemaining == "" {
		opt.HeaderRemaining = "x-ratelimit-remaining"
	}
	if opt.HeaderReset == "" {
		opt.HeaderReset = "x-ratelimit-reset"
	}
	s := &Service{src: src, opt: opt, metrics: opt.Metrics, logger: opt.Logger, clock: opt.Clock}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if opt.Leases == nil {
		if d := src.Config().leasedDomain(); d != "" {
			return nil, fmt.Errorf("rls: domain %q has lease: true descriptors, which need Options.Leases", d)
		}
		return s, nil
	}
	var err error
	if s.leases, err = hybrid.NewLeases(opt.Store, *opt.Leases); err != nil {
		return nil, fmt.Errorf("rls: Options.Leases: %w", err)
	}
	return s, nil
}

// Close gives back the tokens of the batches Options.Leases holds and
// stops its goroutine: call it once the server has stopped. It does not
// close Options.Store. Without Leases it does nothing. It returns nil,
// and is idempotent.
func (s *Service) Close() error {
	if s.leases != nil {
		return s.leases.Close()
	}
	return nil
}

// item is one descriptor of a request on its way to a status.
type item struct {
	limit  *Limit
	proto  *pb.RateLimitResponse_RateLimit
	policy algo.Policy
	key    string
	cost   int64
	kind   uint8 // what decides it: below
	res    algo.Result
	req    int // index in its take group, when grouped
	// grouped: the store is asked about it (charged, or peeked at).
	grouped bool
}

const (
	kindNone      uint8 = iota // no limit: OK, no current_limit
	kindUnlimited              // unlimited: OK, remaining MaxUint32
	kindBlocked                // requests_per_unit 0, or a cost above the burst: always over
	kindTake                   // the store decides
)

// ShouldRateLimit decides a request: each descriptor is matched against
// the domain's configuration and the matched buckets are taken, all
// together or none (see the package documentation for Cluster). The
// overall code is OVER_LIMIT when any descriptor that is not in shadow or
// quota mode is over its limit.
//
// A request without a domain or descriptors is InvalidArgument; a store
// that cannot decide makes it Unavailable (Envoy then applies its
// failure_mode_deny setting); a store that refuses the server's buckets as
// bad input (a deployment fault: see the package documentation) makes it
// Internal; a call that ended is Canceled or DeadlineExceeded.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.decide(ctx, req)
	if m := s.metrics; m != nil {
		m.latency.Observe(time.Since(start).Seconds())
		switch {
		case err != nil:
			m.requests.WithLabelValues("error").Inc()
		case resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT:
			m.requests.WithLabelValues(resultOver).Inc()
		default:
			m.requests.WithLabelValues(resultOK).Inc()
		}
	}
	return resp, err
}

func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	root := s.src.Config().domains[req.Domain]
	domain := req.Domain
	if root == nil {
		domain = "unknown"
	}
	items := make([]item, len(req.Descriptors))
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		it := &items[i]
		it.cost = int64(max(1, req.HitsAddend))
		if d.HitsAddend != nil {
			it.cost = int64(min(d.HitsAddend.Value, math.MaxInt64))
		}
		if d.IsNegativeHits {
			it.cost = 0 // a refund: not supported, so it charges nothing
		}
		if d.Limit != nil {
			s.override(it, req.Domain, d)
			continue
		}
		if root == nil || len(d.Entries) == 0 {
			continue
		}
		l, shared := root.lookup(d.Entries)
		if l == nil {
			continue
		}
		it.limit, it.proto = l, l.proto
		for _, r := range l.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if !l.Unlimited && l.RequestsPerUnit > 0 {
			it.policy = l.Policy
			it.key = bucketKey(s.opt.Prefix, req.Domain, d.Entries, shared, s.opt.HashTag, "")
		}
	}
	var groups [groupCount][]store.Request
	var names [groupCount][]string // each request's limit, for observers
	for i := range items {
		it := &items[i]
		if it.limit != nil && it.limit.Name != "" && replaced[it.limit.Name] {
			*it = item{} // replaced: as if it matched nothing
		}
		switch {
		case it.limit != nil && it.limit.Unlimited:
			it.kind = kindUnlimited
		case it.proto == nil:
			it.kind = kindNone
		case it.key == "":
			it.kind = kindBlocked
		default:
			// A cost above the burst can never pass: the bucket is only
			// peeked at, for its remaining tokens.
			it.kind, it.grouped = kindTake, true
			cost := it.cost
			if cost > it.policy.Capacity() {
				it.kind, cost = kindBlocked, 0
			}
			g := s.groupOf(it.limit)
			it.req = addRequest(&groups[g], store.Request{Key: it.key, Policy: it.policy, Cost: cost})
			if it.req == len(names[g]) {
				names[g] = append(names[g], it.limit.policyName())
			}
		}
	}
	// A descriptor sent twice adds up its costs (addRequest); a sum
	// above the burst can never pass, so it is refused like a single
	// cost above the burst, and its request only peeks.
	for i := range items {
		it := &items[i]
		if !it.grouped {
			continue
		}
		if groups[s.groupOf(it.limit)][it.req].Cost > it.policy.Capacity() {
			it.kind = kindBlocked
		}
	}
	for _, group := range groups {
		for j := range group {
			if group[j].Cost > group[j].Policy.Capacity() {
				group[j].Cost = 0
			}
		}
	}
	allowed := true
	for i := range items {
		if it := &items[i]; it.kind == kindBlocked && !it.limit.soft() {
			allowed = false
		}
	}
	// Leased buckets first, each on its own (mostly from a batch, with
	// no call): a refusal there leaves the others uncharged; a refusal by
	// the others gives the leased ones' tokens back.
	var res [groupCount]store.MultiResult
	var err error
	res[groupLeased], err = s.takeLeased(ctx, domain, groups[groupLeased], names[groupLeased], allowed)
	if err == nil {
		allowed = allowed && res[groupLeased].Allowed // and then the leased ones are charged
		res[groupEnforce], err = s.take(labelled(ctx, domain, names[groupEnforce], false), groups[groupEnforce], allowed)
		if allowed && (err != nil || !res[groupEnforce].Allowed) {
			s.giveBack(ctx, domain, groups[groupLeased], res[groupLeased])
		}
	}
	if err == nil {
		allowed = allowed && res[groupEnforce].Allowed
		res[groupShadow], err = s.take(labelled(ctx, domain, names[groupShadow], true), groups[groupShadow], allowed)
		for i := range items {
			if it := &items[i]; it.grouped && err == nil {
				it.res = res[s.groupOf(it.limit)].Results[it.req]
			}
		}
	}
	if err != nil {
		return nil, s.failed(ctx, domain, err)
	}
	return s.respond(items, domain), nil
}

// labelled returns ctx naming, for the store's observers (observe.Wrap),
// the domain as the route and each request's limit as its policy; shadow
// for the group of shadow and quota limits, whose refusals are reported,
// not enforced. ctx itself when nothing is observed.
func labelled(ctx context.Context, domain string, names []string, shadow bool) context.Context {
	if !observe.Active() || len(names) == 0 {
		return ctx
	}
	return observe.WithLabels(ctx, observe.Labels{Route: domain, Policy: names[0], Policies: names, Shadow: shadow})
}

// policyName is the limit's name for observers: its configured name, or
// "override" for a limit Envoy sent with the descriptor (nil here), or
// empty for an unnamed one. Never a descriptor's value: those come from
// requests.
func (l *Limit) policyName() string {
	if l == nil {
		return "override"
	}
	return l.Name
}

// soft reports a limit whose refusals are reported, not enforced.
func (l *Limit) soft() bool { return l != nil && (l.Shadow || l.Quota) }

// override applies a descriptor's limit override, sent by Envoy: its own
// policy, on a bucket of its own.
func (s *Service) override(it *item, domain string, d *rlpb.RateLimitDescriptor) {
	o := d.Limit
	mult := uint32(1)
	if o.UnitMultiplier != nil && o.UnitMultiplier.Value > 0 {
		mult = o.UnitMultiplier.Value
	}
	unit := pb.RateLimitResponse_RateLimit_Unit(o.Unit)
	it.proto = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.RequestsPerUnit, Unit: unit}
	length := unitLength(unit)
	if o.RequestsPerUnit == 0 || length == 0 || len(d.Entries) == 0 {
		return // blocked: nothing can pass a limit of 0 or of no unit
	}
	p, err := algo.NewPolicy(int64(o.RequestsPerUnit), algo.Per(int64(o.RequestsPerUnit), time.Duration(mult)*length))
	if err != nil {
		return
	}
	it.policy = p
	suffix := "|@" + strconv.FormatUint(uint64(o.RequestsPerUnit), 10) + "/" + strconv.FormatUint(uint64(mult), 10) + unit.String()
	it.key = bucketKey(s.opt.Prefix, domain, d.Entries, nil, s.opt.HashTag, suffix)
}

// Key returns the bucket key (before the store's own prefix) that a
// descriptor of domain is charged to under the configuration in use, and
// false when it matches no limit that keeps a bucket (no limit,
// unlimited, or requests_per_unit 0). Tools use it to inspect
// a bucket (redisstore's Inspect) or reset it.
func (s *Service) Key(domain string, d *rlpb.RateLimitDescriptor) (string, bool) {
	it := &item{}
	if d.Limit != nil {
		s.override(it, domain, d)
		return it.key, it.key != ""
	}
	root := s.src.Config().domains[domain]
	if root == nil || len(d.Entries) == 0 {
		return "", false
	}
	l, shared := root.lookup(d.Entries)
	if l == nil || l.Unlimited || l.RequestsPerUnit == 0 {
		return "", false
	}
	return bucketKey(s.opt.Prefix, domain, d.Entries, shared, s.opt.HashTag, ""), true
}

// addRequest appends r to group, or, when a request for the same bucket is
// already there (a descriptor sent twice), adds r's cost to it, and
// returns the request's index.
func addRequest(group *[]store.Request, r store.Request) int {
	for j, q := range *group {
		if q.Key == r.Key && q.Policy == r.Policy {
			(*group)[j].Cost = min(q.Cost+r.Cost, q.Policy.Capacity()+1) // no overflow
			return j
		}
	}
	*group = append(*group, r)
	return len(*group) - 1
}

// take applies reqs, or only peeks at them (cost 0) when charge is false,
// atomically when the store and the slots allow. Results has one Result
// per request.
func (s *Service) take(ctx context.Context, reqs []store.Request, charge bool) (store.MultiResult, error) {
	if !charge {
		peek := make([]store.Request, len(reqs))
		for i, r := range reqs {
			peek[i] = store.Request{Key: r.Key, Policy: r.Policy}
		}
		reqs = peek
	}
	switch {
	case len(reqs) == 0:
		return store.MultiResult{Allowed: true}, nil
	case len(reqs) == 1:
		res, err := s.opt.Store.Take(ctx, reqs[0])
		if err != nil {
			return store.MultiResult{}, err
		}
		return store.MultiResult{Allowed: res.Allowed, Results: []algo.Result{res}}, nil
	case !s.opt.Cluster || oneSlot(reqs):
		res, err := s.opt.Store.TakeMulti(ctx, reqs)
		if err == nil && !res.Allowed {
			// A bucket that would have admitted was not charged: report
			// it as it is, as a peek would (Remaining and ResetAfter).
			for i, r := range res.Results {
				res.Results[i] = algo.TokenBucket{}.Uncharged(reqs[i].Policy, r, reqs[i].Cost)
			}
		}
		return res, err
	}
	// In order, one slot at a time:
	// once a group is refused, the later ones are only peeked at.
	out := store.MultiResult{Allowed: true, Results: make([]algo.Result, len(reqs))}
	done := make([]bool, len(reqs))
	for i := range reqs {
		if done[i] {
			continue
		}
		var idx []int
		for j := i; j < len(reqs); j++ {
			if !done[j] && (j == i || redisstore.Slot(reqs[j].Key) == redisstore.Slot(reqs[i].Key)) {
				idx = append(idx, j)
				done[j] = true
			}
		}
		group := make([]store.Request, len(idx))
		for k, j := range idx {
			group[k] = reqs[j]
			if !out.Allowed {
				group[k].Cost = 0
			}
		}
		res, err := s.take(sublabelled(ctx, idx), group, true)
		if err != nil {
			return store.MultiResult{}, err
		}
		out.Allowed = out.Allowed && res.Allowed
		for k, j := range idx {
			out.Results[j] = res.Results[k]
		}
	}
	return out, nil
}

// sublabelled returns ctx with its labels' policies those of the
// requests idx, for a group taken apart.
func sublabelled(ctx context.Context, idx []int) context.Context {
	l, ok := observe.LabelsFrom(ctx)
	if !ok {
		return ctx
	}
	names := make([]string, len(idx))
	for k, j := range idx {
		if j < len(l.Policies) {
			names[k] = l.Policies[j]
		}
	}
	l.Policy, l.Policies = names[0], names
	return observe.WithLabels(ctx, l)
}

func oneSlot(reqs []store.Request) bool {
	slot := redisstore.Slot(reqs[0].Key)
	for _, r := range reqs[1:] {
		if redisstore.Slot(r.Key) != slot {
			return false
		}
	}
	return true
}

// failed turns a store error into the call's status: the call's own
// cancellation or deadline as it is; an input error (store.IsInputError)
// Internal; anything else Unavailable, counted as a store error.
//
// An input error here is never the request's: keys are built and escaped
// by the server, policies come from the configuration Load checked, and a
// cost above a bucket's capacity never reaches the store. It is the
// deployment's (a store with a MaxKeyLen below the keys' 226 bytes, a Redis
// Cluster store without Options.Cluster or a Ring, whose multi-bucket takes
// it refuses, a store whose algorithm cannot take a token bucket), so the
// same call would fail again: the store is up, and is not counted as
// down. Envoy's ratelimit filter treats
// every error status alike (its gRPC client's onFailure ignores the code,
// and failure_mode_deny decides), so the code is for the operator reading
// Envoy's per-status gRPC stats and for a retry_policy: Internal says the
// server is at fault, where InvalidArgument would blame Envoy's descriptors
// and Unavailable invite retries that cannot succeed.
func (s *Service) failed(ctx context.Context, domain string, err error) error {
	if err := contextError(ctx, err); err != nil {
		return err
	}
	if store.IsInputError(err) {
		if s.logged.ok() {
			s.logger.Error("rls: the store refused the request's buckets; answering INTERNAL", "domain", domain, "err", err)
		}
		return status.Error(codes.Internal, "rate limit server misconfigured")
	}
	if s.metrics != nil {
		s.metrics.storeErrors.WithLabelValues(domain).Inc()
	}
	if s.logged.ok() {
		s.logger.Warn("rls: the store could not decide; answering UNAVAILABLE", "domain", domain, "err", err)
	}
	return status.Error(codes.Unavailable, "rate limit store unavailable")
}

// logEvery lets one log record through per second.
type logEvery struct{ last atomic.Int64 }

func (l *logEvery) ok() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(time.Second) && l.last.CompareAndSwap(last, now)
}

// contextError returns the status of a store error caused by the call's
// own context (Canceled, DeadlineExceeded), or nil for any other error.
// A store call given a context with a deadline sets no timeout of its
// own, so a deadline error is the caller's even when the socket's timer
// fired a moment before ctx.Err() was set.
func contextError(ctx context.Context, err error) error {
	_, hasDeadline := ctx.Deadline()
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, context.DeadlineExceeded) && hasDeadline:
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return nil
}
