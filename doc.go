// Package ratebucket is exact token-bucket rate limiting, in one process
// or across a fleet of instances that share one bucket per client. A
// [Limiter] applies one policy (a capacity and a refill rate, package
// algo) to a bucket per key, kept by any store.Store: memstore in
// process, redisstore on Redis, hybrid's wrappers around either.
//
//	ms, _ := memstore.New(memstore.Config{})
//	lim, _ := ratebucket.NewLimiter(ms, algo.PerSecond(1).Burst(3), ratebucket.Config{})
//	res, err := lim.Allow(ctx, "alice")
//	if err == nil && !res.Allowed {
//		// refuse, and tell the client to come back after res.RetryAfter
//	}
//
// Allow and Take never block: they suit servers, which answer a denied
// request at once. Wait blocks until admitted: it suits clients and jobs
// that pace themselves. The Result says what a store decided (Allowed,
// Remaining, RetryAfter, ResetAfter), exactly: package algo does the math
// once, in integers, and the Redis script reproduces it bit for bit.
//
// # Around a take: refund, take at most, reserve
//
// Besides taking, a Limiter gives tokens back, grants part of a batch, and
// admits a request after an exact, bounded delay instead of refusing it:
//
//	res, err := lim.Refund(ctx, userID, 1)          // the upload failed: its token back
//	n, res, err := lim.TakeAtMost(ctx, jobID, 500)  // a batch takes what there is, up to 500
//	r, err := lim.Reserve(ctx, userID, 1, 2*time.Second)
//	res, err = r.Wait(ctx) // held r.Delay; if ctx ends first, cancelled and its tokens back
//
// A refund never raises a bucket above its capacity; a take at most n that
// grants nothing is a denial with the exact wait for one token;
// reservations are served in the order they were made, so a large one is
// not starved by small ones, and a cancelled one gives its tokens back
// exactly while it is the latest on its key. [Limiter.Wait] reserves and
// waits.
//
// # At most N in flight
//
// A [Limiter] bounds how often; a [ConcurrencyLimiter] bounds how many at
// once, with the store's leases. Acquire before the work,
// Release after; a lease not released (its holder crashed) frees its slot
// when its TTL runs out, and a holder that runs longer renews it:
//
//	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 10, TTL: time.Minute}, ratebucket.ConcurrencyConfig{})
//	lease, err := lim.Acquire(ctx, userID) // lease.Allowed, or lease.RetryAfter
//	defer lim.Release(context.WithoutCancel(ctx), lease)
//
// # Policies per key, and shadow limits
//
// A [Resolver] chooses a key's policy at runtime, for example from the
// tenant's plan, and may price its requests; a [ResolverCache] in front of
// a slow one is bounded (Size keys) and stale for at most its TTL. A
// resolver that fails fails the call with [ErrResolve], never a default:
//
//	plans, err := ratebucket.NewResolverCache(tenantPlan, ratebucket.CacheConfig{TTL: 30 * time.Second})
//	lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Resolver: plans.Resolve})
//
// A shadow Limiter (Config.Shadow) charges its own bucket as an enforced
// one would and reports its refusals to the observers as shadow denials,
// but never refuses its caller: how a new limit is rolled out safely.
//
// # The rooms below
//
// The front door holds no math and knows no backend. Below it: algo (the
// math), store (the contract every backend implements), memstore and
// redisstore (the backends), hybrid (a deny cache and a fallback in front
// of any store), and observe (decisions and latency for metrics). Beside
// it, over the same stores: httplimit (net/http middleware) and sim (the
// simulator).
package ratebucket
