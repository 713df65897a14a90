package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/limitheader"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
)

// FailMode says what a call gets when the store cannot decide (Redis down,
// a timeout, a closed store). A store failure is never ResourceExhausted:
// that code tells the client it sent too much, and it did not.
type FailMode uint8

const (
	// FailDefault, the zero value, is the Config's mode in a Rule and
	// FailOpen in the Config.
	FailDefault FailMode = iota
	// FailOpen runs the handler unlimited, without rate-limit metadata:
	// an outage of the limiter is not an outage of the service. The
	// failure is logged.
	FailOpen
	// FailClosed refuses the call with codes.Unavailable ("rate limiter
	// unavailable"): for methods where an unlimited caller costs more
	// than an outage (login, payment).
	FailClosed
)

// Rule is how calls to one method, or to every method of a service, are
// limited.
type Rule struct {
	// Name names the rule's buckets: 1 to 32 bytes of [A-Za-z0-9_.-].
	// Rules with one name share buckets, so they must have one Policy.
	// The default, "default", is the Config's rule: a Rule that only
	// changes Cost, Key or Fail draws from the same buckets as every other
	// method. A Rule with its own Policy needs a Name of its own.
	Name string
	// Policy is the bucket's shape. Default: the Config's Policy.
	Policy algo.Policy
	// Cost is how many tokens a call (or a stream, once, when it opens)
	// takes. Default 1. A cost above the Policy's capacity could never be
	// admitted, so [New] refuses it.
	Cost int64
	// Key names a call's bucket. Default: the Config's Key.
	Key KeyFunc
	// Fail is the rule's FailMode. Default: the Config's.
	Fail FailMode
	// Settle, when set, names the response trailer in which the handler
	// reports a call's actual cost in tokens (decimal; the last value
	// counts), for calls whose cost is known only after they ran (an LLM
	// call's tokens): the call holds Cost as its estimate
	// (store.Store.Hold) and, when the handler returns, is charged the
	// actual cost, the difference given back or the extra charged into at
	// most one bucket of debt that later calls wait out (RetryInfo is
	// exact). A call without the trailer keeps its estimate; one whose
	// handler panics keeps it too, when its hold's TTL (5 minutes) passes.
	// A stream is settled when it ends. Not for a calendar quota.
	Settle string
	// Exempt lets calls through unlimited and uncharged, with no
	// metadata: for health checks and reflection. An Exempt rule sets no
	// other field: it has no bucket, so [New] refuses a Name, Policy,
	// Cost, Key or Fail beside it, which would never apply.
	Exempt bool
}

// Config configures a [Limiter]. The zero value limits every method by the
// caller's identity, else its peer address, to a burst of 100 and 2 calls
// per second, in a new in-process memstore, failing open.
type Config struct {
	// Store keeps the buckets. Use a redisstore so that every instance of
	// the service shares one limit. Default: a new memstore (per process).
	Store store.Store
	// Policy is the default rule's policy. Default:
	// algo.PerSecond(2).Burst(100).
	Policy algo.Policy
	// Cost is the default rule's cost. Default 1.
	Cost int64
	// Key is the default rule's KeyFunc. Default: IdentityOr(Peer).
	Key KeyFunc
	// Fail is the default rule's FailMode. Default: FailOpen.
	Fail FailMode
	// Methods holds rules by full method name ("/pkg.Service/Method") or
	// by service ("/pkg.Service/*"); the exact name wins. Methods not
	// listed follow the default rule.
	Methods map[string]Rule
	// Prefix starts every bucket key. Default "g:".
	Prefix string
	// NoMetadata turns off the rate-limit response metadata. RetryInfo is
	// sent with every refusal whatever this says.
	NoMetadata bool
	// Clock is read for x-ratelimit-reset only. Default: the real clock.
	Clock store.Clock
	// Logger receives store failures and internal errors, at most one
	// record a second. Default: slog.Default().
	Logger *slog.Logger
	// Leases, when set, spends hot keys' tokens from leased batches: New
	// wraps Store in hybrid.NewLeases(Store, *Leases), so a bucket whose
	// demand over a Lifetime reaches MinBatch (a rule keyed by service, a
	// caller that floods) costs one Store call per batch instead of one
	// per call, and stays one limit for the fleet within the bound of
	// docs/leases.md (set Instances to the fleet's size). Cold keys and
	// calendar quotas go to the Store as before. It needs an explicit
	// Store: New returns an error wrapping ErrInvalidConfig without one,
	// and wrapping hybrid.ErrInvalidConfig too for a LeasesConfig that
	// hybrid.NewLeases refuses (Instances is required). Call
	// [Limiter.Close] when the server stops, to give the batches back.
	// Default: nil, every call is a Store call.
	Leases *hybrid.LeasesConfig
}

// maxPrefixLen bounds Config.Prefix so that no bucket key is longer than
// store.DefaultMaxKeyLen: prefix, a 32-byte name and class, a 64-byte ID
// (or its 33-byte digest) and four separators come to at most 196 bytes.
const maxPrefixLen = 64

// ErrInvalidConfig reports a Config or Rule that cannot work.
var ErrInvalidConfig = errors.New("grpclimit: invalid config")

// Limiter holds the interceptors. Make one with [New]; it is immutable and
// safe for simultaneous use by multiple goroutines.
type Limiter struct {
	store      store.Store
	prefix     string
	def        *rule
	methods    map[string]*rule // by full method name
	services   map[string]*rule // by "/pkg.Service/"
	noMetadata bool
	clock      store.Clock
	logger     *slog.Logger
	lastLog    atomic.Int64   // unix nanoseconds of the last log record
	leases     *hybrid.Leases // over the Store, when Config.Leases is set
}

// rule is a Rule with its defaults applied and its policy fields
// rendered once.
type rule struct {
	name   string
	policy algo.Policy
	cost   int64
	key    KeyFunc
	fail   FailMode
	exempt bool
	settle string // the trailer of the actual cost, lower case; "" to take
	// draftPolicy is the ratelimit-policy item, `"name";q=100;w=50`, of
	// a bucket; empty for a calendar quota, whose w is the period that
	// holds the call (a month's is 28 to 31 days).
	draftPolicy string
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns a Limiter for cfg, or an error wrapping [ErrInvalidConfig].
func New(cfg Config) (*Limiter, error) {
	if cfg.Policy == (algo.Policy{}) {
		cfg.Policy = algo.PerSecond(2).Burst(100)
	}
	if cfg.Leases != nil && cfg.Store == nil {
		return nil, fmt.Errorf("%w: Leases need a Store shared by the fleet; the default in-process store has no calls to save", ErrInvalidConfig)
	}
	if cfg.Store == nil {
		ms, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, err
		}
		cfg.Store = ms
	}
	l := &Limiter{
		store:      cfg.Store,
		prefix:     cfg.Prefix,
		methods:    map[string]*rule{},
		services:   map[string]*rule{},
		noMetadata: cfg.NoMetadata,
		clock:      cfg.Clock,
		logger:     cfg.Logger,
	}
	if l.prefix == "" {
		l.prefix = "g:"
	}
	if len(l.prefix) > maxPrefixLen {
		return nil, fmt.Errorf("%w: Prefix of %d bytes, at most %d", ErrInvalidConfig, len(l.prefix), maxPrefixLen)
	}
	if l.clock == nil {
		l.clock = realClock{}
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	base := Rule{Name: "default", Policy: cfg.Policy, Cost: cfg.Cost, Key: cfg.Key, Fail: cfg.Fail}
	if base.Key == nil {
		base.Key = IdentityOr(Peer)
	}
	if base.Fail == FailDefault {
		base.Fail = FailOpen
	}
	var err error
	if l.def, err = compile("the default rule", base, base); err != nil {
		return nil, err
	}
	policies := map[string]algo.Policy{l.def.name: l.def.policy}
	for m, r := range cfg.Methods {
		where := fmt.Sprintf("Methods[%q]", m)
		svc, wildcard := strings.CutSuffix(m, "/*")
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") {
			return nil, fmt.Errorf("%w: %s: want \"/pkg.Service/Method\" or \"/pkg.Service/*\"", ErrInvalidConfig, where)
		}
		var cr *rule
		if r.Exempt {
			if set := exemptFields(r); set != "" {
				return nil, fmt.Errorf("%w: %s: an Exempt rule is neither limited nor charged, so its %s would never apply", ErrInvalidConfig, where, set)
			}
			cr = &rule{exempt: true}
		} else {
			if r.Name == "" && r.Policy != (algo.Policy{}) && r.Policy != base.Policy {
				return nil, fmt.Errorf("%w: %s: a rule with its own Policy needs a Name", ErrInvalidConfig, where)
			}
			if cr, err = compile(where, r, base); err != nil {
				return nil, err
			}
			if p, ok := policies[cr.name]; ok && p != cr.policy {
				return nil, fmt.Errorf("%w: %s: rule %q has two policies, %v and %v", ErrInvalidConfig, where, cr.name, p, cr.policy)
			}
			policies[cr.name] = cr.policy
		}
		if wildcard {
			l.services[svc+"/"] = cr
		} else {
			l.methods[m] = cr
		}
	}
	if cfg.Leases != nil { // last: nothing fails after it starts its goroutine
		if l.leases, err = hybrid.NewLeases(cfg.Store, *cfg.Leases); err != nil {
			return nil, fmt.Errorf("%w: Leases: %w", ErrInvalidConfig, err)
		}
		l.store = l.leases
	}
	return l, nil
}

// Close gives back the tokens of the batches Config.Leases holds and stops
// its goroutine: call it once the server has stopped (calls after Close
// fail as the store's calls do, store.ErrClosed, to the rule's FailMode).
// It does not close Config.Store. Without Leases it does nothing. It
// returns nil, and is idempotent.
func (l *Limiter) Close() error {
	if l.leases != nil {
		return l.leases.Close()
	}
	return nil
}

// exemptFields names the fields of the Exempt rule r that are set, or
// returns "".
func exemptFields(r Rule) string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"Name", r.Name != ""}, {"Policy", r.Policy != (algo.Policy{})}, {"Cost", r.Cost != 0}, {"Key", r.Key != nil}, {"Fail", r.Fail != FailDefault}} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return strings.Join(set, " and ")
}

// compile applies base's fields to r's zero ones and checks the result.
func compile(where string, r, base Rule) (*rule, error) {
	if r.Name == "" {
		r.Name = base.Name
	}
	if r.Policy == (algo.Policy{}) {
		r.Policy = base.Policy
	}
	if r.Cost == 0 {
		r.Cost = max(base.Cost, 1)
	}
	if r.Key == nil {
		r.Key = base.Key
	}
	if r.Fail == FailDefault {
		r.Fail = base.Fail
	}
	switch {
	case !validName(r.Name):
		return nil, fmt.Errorf("%w: %s: Name %q is not 1 to 32 bytes of [A-Za-z0-9_.-]", ErrInvalidConfig, where, r.Name)
	case r.Fail > FailClosed:
		return nil, fmt.Errorf("%w: %s: unknown FailMode %d", ErrInvalidConfig, where, r.Fail)
	}
	if err := store.CheckRequest(store.Request{Key: "k", Policy: r.Policy, Cost: r.Cost}, 1); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, where, err)
	}
	if r.Settle != "" && r.Policy.IsQuota() {
		return nil, fmt.Errorf("%w: %s: Settle under a calendar quota: %w", ErrInvalidConfig, where, algo.ErrQuotaUnsupported)
	}
	cr := &rule{name: r.Name, policy: r.Policy, cost: r.Cost, key: r.Key, fail: r.Fail, settle: strings.ToLower(r.Settle)}
	if !r.Policy.IsQuota() {
		cr.draftPolicy = cr.policyItem(time.Time{})
	}
	return cr, nil
}

// policyItem renders the rule's ratelimit-policy item at now.
func (r *rule) policyItem(now time.Time) string {
	return string(limitheader.AppendPolicy(nil, r.name, r.policy.Capacity(), limitheader.Window(r.policy, now)))
}

// ruleFor returns the rule of a full method name.
func (l *Limiter) ruleFor(method string) *rule {
	if r, ok := l.methods[method]; ok {
		return r
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if r, ok := l.services[method[:i+1]]; ok {
			return r
		}
	}
	return l.def
}

// Unary returns the unary server interceptor. Put it after your
// authentication interceptor, which sets the identity ([WithIdentity]).
func (l *Limiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h, err := l.admit(ctx, info.FullMethod, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
		if err != nil {
			return nil, err
		}
		ts := grpc.ServerTransportStreamFromContext(ctx)
		if h == nil || ts == nil {
			return handler(ctx, req)
		}
		tr := &trailers{ServerTransportStream: ts}
		resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, tr), req)
		l.settle(ctx, info.FullMethod, h, tr.get())
		return resp, err
	}
}

// Stream returns the stream server interceptor: a stream is charged once,
// when it opens.
func (l *Limiter) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		h, err := l.admit(ss.Context(), info.FullMethod, ss.SetHeader)
		if err != nil {
			return err
		}
		if h == nil {
			return handler(srv, ss)
		}
		st := &trailerStream{ServerStream: ss}
		err = handler(srv, st)
		l.settle(ss.Context(), info.FullMethod, h, st.get())
		return err
	}
}

// admit decides one call: nil to run the handler, else the status error
// to end it with; and the call's hold to settle, when its rule settles.
func (l *Limiter) admit(ctx context.Context, method string, setHeader func(metadata.MD) error) (*holding, error) {
	r := l.ruleFor(method)
	if r.exempt {
		return nil, nil
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	k, err := r.key(ctx, method, md)
	if err == nil {
		switch {
		case k.ID == "":
			err = fmt.Errorf("%w: the KeyFunc returned an empty ID", ErrNoKey)
		case !validName(k.Class):
			err = fmt.Errorf("grpclimit: the KeyFunc returned an invalid class %q", k.Class)
		}
	}
	if err != nil {
		if _, isStatus := status.FromError(err); isStatus {
			return nil, err
		}
		if errors.Is(err, ErrNoKey) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		l.log(ctx, "grpclimit: no key for a call", method, err)
		return nil, status.Error(codes.Internal, "rate limiter: no key for this call")
	}
	key := l.prefix + r.name + ":" + k.Class + "{" + bucketID(k.ID) + "}"
	if observe.Active() {
		// For the store's observers (observe.Wrap): the method as the
		// route, the rule as the policy.
		ctx = observe.WithLabels(ctx, observe.Labels{Route: method, Policy: r.name})
	}
	q := store.Request{Key: key, Policy: r.policy, Cost: r.cost}
	var h *holding
	var res algo.Result
	if r.settle != "" {
		q.Refundable = true // settled by the instance that holds it
		var hold algo.Hold
		hold, res, err = l.store.Hold(ctx, q, settleTTL)
		h = &holding{rule: r, req: q, hold: hold}
	} else {
		res, err = l.store.Take(ctx, q)
	}
	if err != nil {
		return nil, l.failure(ctx, method, r, err)
	}
	if !l.noMetadata {
		// The header is best effort: it fails only once headers were
		// sent, which no interceptor before the handler has done.
		_ = setHeader(l.metadata(r, res))
	}
	if res.Allowed {
		return h, nil
	}
	return nil, denial(r, res)
}

// failure turns a store error into the call's outcome.
func (l *Limiter) failure(ctx context.Context, method string, r *rule, err error) error {
	if err := contextError(ctx, err); err != nil {
		return err
	}
	if store.IsInputError(err) {
		l.log(ctx, "grpclimit: the store refused the call's bucket", method, err)
		return status.Error(codes.Internal, "rate limiter: misconfigured")
	}
	l.log(ctx, "grpclimit: store failed", method, err, slog.Bool("failOpen", r.fail == FailOpen))
	if r.fail == FailOpen {
		return nil
	}
	return status.Error(codes.Unavailable, "rate limiter unavailable")
}

// log writes one record unless one was written less than a second ago.
func (l *Limiter) log(ctx context.Context, msg, method string, err error, attrs ...slog.Attr) {
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	attrs = append(attrs, slog.String("method", method), slog.Any("err", err))
	l.logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
}

// Response metadata keys. gRPC metadata keys are lower case. The names
// and values are httplimit's HTTP headers' and rls's, from one definition
// (internal/limitheader), pinned by
// internal/testdata/ratelimit-headers.json.
const (
	MDLimit      = limitheader.Limit      // the bucket's capacity
	MDRemaining  = limitheader.Remaining  // whole tokens left
	MDReset      = limitheader.Reset      // Unix seconds, rounded up, when the bucket is full
	MDPolicy     = limitheader.Policy     // draft-10: "name";q=capacity;w=fill seconds, or a quota's period in seconds
	MDRateLimit  = limitheader.RateLimit  // draft-10: "name";r=remaining;t=delay-seconds until full, rounded up
	MDRetryAfter = limitheader.RetryAfter // on a refusal only: delay-seconds until admitted, rounded up, at least 1
)

// metadata renders res as response metadata, in the formats httplimit
// uses for the same HTTP headers.
func (l *Limiter) metadata(r *rule, res algo.Result) metadata.MD {
	now := l.clock.Now()
	f := limitheader.Render(now, limitheader.Answer{Name: r.name, Capacity: r.policy.Capacity(),
		Remaining: res.Remaining, ResetAfter: res.ResetAfter, RetryAfter: res.RetryAfter, Denied: !res.Allowed})
	pol := r.draftPolicy
	if pol == "" {
		pol = r.policyItem(now)
	}
	md := metadata.MD{
		MDLimit:     {f.Limit},
		MDRemaining: {f.Remaining},
		MDReset:     {f.Reset},
		MDPolicy:    {pol},
		MDRateLimit: {f.RateLimit},
	}
	if f.RetryAfter != "" {
		md[MDRetryAfter] = []string{f.RetryAfter}
	}
	return md
}

// denial is the status of a refused call: ResourceExhausted with the exact
// wait in a RetryInfo.
func denial(r *rule, res algo.Result) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit %q exceeded; retry in %v", r.name, res.RetryAfter))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)}); err == nil {
		st = d
	}
	return st.Err()
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
