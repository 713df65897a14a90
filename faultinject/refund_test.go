package faultinject

import (
	"context"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
)

// TestRefundLostReply: with a DenyCache between the Fallback and
// redisstore, a refund whose reply the network delays past the timeout
// (the script ran, its answer came too late) has still given the token
// back in Redis. The cache forgets the key whatever the answer, so once
// Redis answers again the key is admitted by Redis, not denied from the
// entry the cache learnt before the refund. While Redis could not answer,
// the refund went to the local share, which never saw the charge: the
// abuser-facing bound of the cache is not loosened by it.
func TestRefundLostReply(t *testing.T) {
	e := newEnvCache(t, hybrid.LocalFallback, true)
	if _, ok := store.Store(e.primary).(store.Refunder); !ok {
		t.Skip("redisstore does not give tokens back (store.Refunder) yet")
	}
	e.warm(t)
	ctx := context.Background()
	hourly := algo.PerHour(1).Burst(1)
	take := func() (algo.Result, error) { return e.f.Take(ctx, "login", hourly, 1) }
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("first login: %+v, %v", res, err)
	}
	if res, err := take(); err != nil || res.Allowed || e.cache.Stats().Denied != 1 {
		t.Fatalf("second login: %+v, %v, cache %+v; want a local denial", res, err, e.cache.Stats())
	}
	e.toxic(t, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":2000}}`)
	if _, err := e.f.Refund(ctx, "login", hourly, 1); err != nil {
		t.Fatalf("refund under the local fallback: %v", err)
	}
	if st := e.f.Stats(); st.Failures != 1 {
		t.Fatalf("%+v: want the refund's call to Redis failed", st)
	}
	healToxics(t, e)
	n := recoverCalls(t, e)
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("after recovery: %+v, %v; want Redis's admission: the lost reply's refund gave the token back", res, err)
	}
	t.Logf("refund with a lost reply: recovered in %d calls; cache %+v", n, e.cache.Stats())
}
