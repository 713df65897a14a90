// Package observe reports what ratebucket's stores decide, for metrics: the
// observer contract. [Wrap] wraps any store.Store to report its decisions
// (allowed, denied, shadow-denied, error, with the store call's latency)
// to an [Observer]; entry points (ratebucket.Limiter, httplimit,
// grpclimit, the rls server) name each call's policy and route with
// [WithLabels], and components report what only they see (hybrid's
// breaker and deny cache, redisstore's pipeline) to the same Observer
// through their Config. contrib/prometheus and contrib/otel are ready
// Observers, and observe/promtext writes the same Prometheus families
// without a dependency:
//
//	s := observe.Wrap(rs, "redis", obs) // obs: any Observer
//
// Counting is pull: an Observer that is a [DecisionCounter] reads the
// counts the wrapper keeps ([DecisionCounts]) when it exports them, so
// that observing adds an atomic addition to a call rather than an
// interface call and a metrics library's counter; a store that is a
// [SelfCounter] (memstore) counts its own Takes, under the locks it holds
// anyway.
//
// The package sits above store, which knows nothing of observers, and
// below everything that reports to it.
package observe
