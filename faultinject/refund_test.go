package faultinject

import (
	"context"
	"testing"
	"time"

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
	e.warm(t)
	ctx := context.Background()
	hourly := algo.PerHour(1).Burst(1)
	take := func() (algo.Result, error) {
		return e.f.Take(ctx, store.Request{Key: "login", Policy: hourly, Cost: 1})
	}
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("first login: %+v, %v", res, err)
	}
	if res, err := take(); err != nil || res.Allowed || e.cache.Stats().Denied != 1 {
		t.Fatalf("second login: %+v, %v, cache %+v; want a local denial", res, err, e.cache.Stats())
	}
	e.toxic(t, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":2000}}`)
	if _, err := e.f.Refund(ctx, store.Request{Key: "login", Policy: hourly, Cost: 1}); err != nil {
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

// TestCancelLostReply: a cancellation whose reply the network delays past
// the timeout (the script ran: the reservation's tokens are back in Redis)
// is answered by the local share, which holds nothing of the primary's
// reservation and gives nothing back. The DenyCache forgets the key
// whatever the answer, so once Redis answers again the token the cancel
// gave back is admitted by Redis, not denied from the entry the cache
// learnt while the reservation was queued.
func TestCancelLostReply(t *testing.T) {
	e := newEnvCache(t, hybrid.LocalFallback, true)
	e.warm(t)
	ctx := context.Background()
	p := algo.PerHour(1).Burst(2)
	take := func() (algo.Result, error) { return e.f.Take(ctx, store.Request{Key: "queue", Policy: p, Cost: 1}) }
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("first take: %+v, %v", res, err)
	}
	rsv, err := e.f.Reserve(ctx, store.Request{Key: "queue", Policy: p, Cost: 2}, 2*time.Hour)
	if err != nil || !rsv.Allowed || rsv.Delay != time.Hour {
		t.Fatalf("Reserve = %+v, %v; want admitted an hour ahead", rsv, err)
	}
	for i, local := range []bool{false, true} { // Redis denies, then the cache learnt it
		before := e.cache.Stats().Denied
		if res, err := take(); err != nil || res.Allowed || (e.cache.Stats().Denied > before) != local {
			t.Fatalf("take %d behind the reservation: %+v, %v; want denied, locally %v", i, res, err, local)
		}
	}
	e.toxic(t, `{"name":"lat","type":"latency","stream":"downstream","attributes":{"latency":2000}}`)
	if ok, _, err := e.f.CancelReservation(ctx, "queue", p, rsv.Ticket); err != nil || ok {
		t.Fatalf("cancel under the local fallback: %v, %v; want nothing given back locally", ok, err)
	}
	if st := e.f.Stats(); st.Failures != 1 {
		t.Fatalf("%+v: want the cancel's call to Redis failed", st)
	}
	healToxics(t, e)
	n := recoverCalls(t, e)
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("after recovery: %+v, %v; want Redis's admission: the lost reply's cancel gave the tokens back", res, err)
	}
	t.Logf("cancel with a lost reply: recovered in %d calls; cache %+v", n, e.cache.Stats())
}

// TestRefundElsewhereMarked: the takes of a key whose tokens another
// instance gives back are marked Refundable (as httplimit's
// ChargeIf routes mark theirs). While Redis is cut off, they are served by
// the local share, never denied from the cache; once it is back, a refund
// made by another instance straight to Redis is seen at once.
func TestRefundElsewhereMarked(t *testing.T) {
	e := newEnvCache(t, hybrid.LocalFallback, true)
	e.warm(t)
	ctx := context.Background()
	hourly := algo.PerHour(1).Burst(1)
	take := func() (algo.Result, error) {
		return e.f.Take(ctx, store.Request{Key: "login", Policy: hourly, Cost: 1, Refundable: true})
	}
	for i, allowed := range []bool{true, false, false} {
		if res, err := take(); err != nil || res.Allowed != allowed {
			t.Fatalf("take %d: %+v, %v; want allowed %v", i, res, err, allowed)
		}
	}
	if st := e.cache.Stats(); st.Entries != 0 || st.Denied != 0 {
		t.Fatalf("cache %+v: want no entry for marked takes", st)
	}
	e.toxic(t, `{"name":"cut","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
	// The local share (burst 1 of 2 instances: 1 token) serves, as for
	// any key the cache cannot prove denied.
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("take while cut off: %+v, %v; want the local share's admission", res, err)
	}
	healToxics(t, e)
	recoverCalls(t, e)
	// Another instance refunds the token straight to Redis.
	if _, err := e.primary.Refund(context.Background(), store.Request{Key: "login", Policy: hourly, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if res, err := take(); err != nil || !res.Allowed {
		t.Fatalf("after a refund elsewhere: %+v, %v; want Redis's admission", res, err)
	}
	if st := e.cache.Stats(); st.Denied != 0 {
		t.Fatalf("cache %+v: a marked take was denied locally", st)
	}
}
