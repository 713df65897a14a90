package promobserver_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebucket/ratebucket/algo"
	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestLeasesOnRedis: a hybrid.Leases over an observed redisstore on a
// real Redis, 200 takes of one hot key: the lease families gathered equal
// the Leases' Stats once it is closed (batches, local admissions, tokens
// returned), local admissions are most of the 200, and the store's
// decisions, the Redis calls that decide, are few.
func TestLeasesOnRedis(t *testing.T) {
	reg, obs := newObserver(t, promobserver.Options{})
	clk := storetest.NewClock()
	rs, err := redisstore.New(redistest.Start(t).Client(), redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	l, err := hybrid.NewLeases(observe.Wrap(rs, "redis", obs), hybrid.LeasesConfig{Instances: 1, Clock: clk, Observer: obs, Name: "hot"})
	if err != nil {
		t.Fatal(err)
	}
	p := algo.PerSecond(1000).Burst(1000)
	for range 200 {
		if res, err := l.Take(context.Background(), store.Request{Key: "global", Policy: p, Cost: 1}); err != nil || !res.Allowed {
			t.Fatalf("Take: %+v, %v", res, err)
		}
	}
	l.Close()
	st := l.Stats()
	for name, want := range map[string]int64{
		"ratebucket_lease_batches_total":          st.Batches,
		"ratebucket_lease_local_admissions_total": st.Local,
		"ratebucket_lease_tokens_returned_total":  st.Returned,
		"ratebucket_lease_tokens_lost_total":      0,
	} {
		if got := testutil.ToFloat64(counter(t, reg, name, "")); got != float64(want) {
			t.Errorf("%s = %v, want %d (Stats %+v)", name, got, want, st)
		}
	}
	local := testutil.ToFloat64(counter(t, reg, "ratebucket_lease_local_admissions_total", ""))
	decided := testutil.ToFloat64(counter(t, reg, "ratebucket_decisions_total", ""))
	t.Logf("200 takes: %v local admissions, %v Redis decisions; %+v", local, decided, st)
	if local < 150 || decided > 25 {
		t.Errorf("%v local admissions and %v Redis decisions for 200 takes", local, decided)
	}
}
