package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// defaultConcurrencyName names a [Concurrency] limit without a Name.
const defaultConcurrencyName = "inflight"

// Concurrency bounds how many requests of one client a route runs at once,
// as Stripe's concurrent-requests limiter and NGINX's limit_conn do: a slow
// endpoint (a report, an upload, a call to a model) is protected from a
// client that opens many at a time, which a rate limit alone allows as
// long as they start slowly enough.
//
//	reports, err := mw.With(httplimit.Config{Concurrency: httplimit.Concurrency{
//		Policy: algo.LeasePolicy{Limit: 2, TTL: 5 * time.Minute},
//	}})
//
// Each request holds a lease (store.Store) for as long as its handler
// runs: the lease is taken before the token-bucket limits are asked, and
// given back when the handler returns, also when it panics, and with a
// context that outlives the request, so a client that hangs up still
// frees its slot. A request that finds Policy.Limit leases of its key held
// gets 429 with Retry-After and the Denied handler's body, and charges no
// bucket; a request the buckets refuse gives its lease back at once, so a
// refusal charges nothing either way. Policy.TTL is how long a slot stays
// taken after an instance crashed mid-request: choose it above the
// longest a handler may run (the server's WriteTimeout, say), since a
// handler that runs longer loses its slot to the next request. The zero
// Concurrency is no limit.
type Concurrency struct {
	// Name identifies the limit in lease keys, in the Observer's Event
	// and in "violated-policies": 1 to 32 bytes of [A-Za-z0-9_.-].
	// Default "inflight". Routes whose limits share a Name share the
	// leases of a key: give each a Name of its own to count them apart.
	Name string
	// Policy is the most requests of one key in flight at once and how
	// long a lease lives unless its request ends first. The zero Policy
	// means no concurrency limit; any other must be valid
	// (algo.LeasePolicy.Validate).
	Policy algo.LeasePolicy
	// Key chooses whose requests are counted. Default: the Config's Key.
	Key KeyFunc
}

// newConcurrency checks c and returns its limit, or nil for the zero
// Concurrency. Its lease keys are laid out as a bucket key of a Limit
// named c.Name ("h:inflight:user{42}"), and are kept
// within store.DefaultMaxKeyLen the same way.
func newConcurrency(c Concurrency, prefix string, key KeyFunc) (*limit, error) {
	if c.Policy == (algo.LeasePolicy{}) {
		return nil, nil
	}
	if c.Name == "" {
		c.Name = defaultConcurrencyName
	}
	if !validName(c.Name) {
		return nil, fmt.Errorf("%w: Concurrency: name %q is not 1-32 bytes of [A-Za-z0-9_.-]", ErrInvalidConfig, c.Name)
	}
	if err := c.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Concurrency %q: %w", ErrInvalidConfig, c.Name, err)
	}
	if c.Key == nil {
		c.Key = key
	}
	l := &limit{name: c.Name, key: c.Key, prefix: prefix + c.Name + ":"}
	if n := l.maxKeyLen(); n > store.DefaultMaxKeyLen {
		return nil, fmt.Errorf("%w: Concurrency %q: its lease keys could be %d bytes, above the %d bytes stores accept by default; shorten Prefix (%d bytes) or the name: %w",
			ErrInvalidConfig, c.Name, n, store.DefaultMaxKeyLen, len(prefix), store.ErrKeyTooLong)
	}
	return l, nil
}

// newInFlight returns the ConcurrencyLimiter of the limit l with policy p
// on s.
func newInFlight(s store.Store, l *limit, p algo.LeasePolicy) (*ratebucket.ConcurrencyLimiter, error) {
	s = baseStore(s) // a ChargeIf route's marks takes only
	lim, err := ratebucket.NewConcurrencyLimiter(s, p, ratebucket.ConcurrencyConfig{})
	if err != nil {
		return nil, fmt.Errorf("%w: Concurrency %q: %w", ErrInvalidConfig, l.name, err)
	}
	return lim, nil
}

// acquire takes r's lease when the route has a Concurrency limit, filling
// d.Concurrency; it returns a zero Lease (nothing to release) when it has
// none.
func (m *Middleware) acquire(r *http.Request, d *Decision) (ratebucket.Lease, error) {
	if m.conc == nil {
		return ratebucket.Lease{}, nil
	}
	k, err := m.conc.keyOf(r)
	if err != nil {
		return ratebucket.Lease{}, err
	}
	lease, err := m.inflight.Acquire(r.Context(), m.conc.bucketKey(k.Class, bucketID(k.ID)))
	d.Concurrency, d.concName, d.concClass = lease.LeaseResult, m.conc.name, k.Class
	return lease, err
}

// release gives back a held lease (a denied one holds nothing), with a
// context that outlives the request: it runs when the handler has
// returned or panicked, perhaps after the client left.
func (m *Middleware) release(r *http.Request, lease ratebucket.Lease) {
	if !lease.Allowed {
		return
	}
	if _, err := m.inflight.Release(context.WithoutCancel(r.Context()), lease); err != nil {
		m.log.log(r.Context(), slog.LevelError, "httplimit: releasing a lease failed; its slot frees when its TTL ends",
			slog.String("pattern", r.Pattern), slog.String("limit", m.conc.name), slog.Any("error", err))
	}
}

// deniedInFlight answers a request refused by the Concurrency limit: 429
// with Retry-After and the Denied handler's body; no bucket was asked,
// so no rate-limit headers are sent.
func (m *Middleware) deniedInFlight(w http.ResponseWriter, r *http.Request, ev Event, d Decision) {
	d.Allowed, d.Limits, d.Decider, d.RetryAfter = false, nil, 0, d.Concurrency.RetryAfter
	ev.Outcome, ev.Limit, ev.Tier, ev.Class = Denied, m.conc.name, "", d.concClass
	m.observe(r, ev)
	w.Header().Set("Retry-After", itoa(retryAfterSeconds(d.RetryAfter)))
	m.denied(w, r, d)
}
