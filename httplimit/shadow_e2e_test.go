package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestRedisResolveAndShadow runs a route with a limit resolved per tenant
// and a shadow limit beside it on real Redis, standalone and Cluster: the
// tenant's plan decides, the shadow limit never refuses, and both buckets
// hold what the in-process tests pin. Then a route with a burst limit and
// a daily calendar quota: the headers list both and describe the quota.
func TestRedisResolveAndShadow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := redisstore.New(tc.client(t), redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			plans := map[string]ratebucket.Resolved{
				"acme":   {Policy: algo.PerHour(1).Burst(2), Name: "free"},
				"globex": {Policy: algo.PerHour(1).Burst(4), Name: "pro"},
			}
			shadow := algo.PerHour(1).Burst(3)
			mw, err := httplimit.New(httplimit.Config{Store: st, Prefix: redistest.Prefix(t), Key: httplimit.User(nil),
				Limits: []httplimit.Limit{
					{Name: "plan", Resolve: ratebucket.Resolver(func(_ context.Context, id string) (ratebucket.Resolved, error) {
						return plans[id], nil
					})},
					{Name: "new", Policy: shadow, Shadow: true},
				}})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for _, c := range []struct {
				tenant string
				codes  []int
				levels [2]int64 // plan, shadow
			}{
				{"acme", []int{200, 200, 429, 429}, [2]int64{0, 0}},   // the shadow counted the refused too
				{"globex", []int{200, 200, 200, 200}, [2]int64{0, 0}}, // the shadow refused the 4th: served
			} {
				var codes []int
				var r *http.Request
				for range len(c.codes) {
					r = httptest.NewRequest(http.MethodGet, "/", nil)
					r = r.WithContext(httplimit.WithUser(r.Context(), c.tenant))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					codes = append(codes, w.Code)
				}
				if !slices.Equal(codes, c.codes) {
					t.Errorf("%s: %v, want %v", c.tenant, codes, c.codes)
				}
				keys, err := mw.Keys(r)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range []algo.Policy{plans[c.tenant].Policy, shadow} {
					res, err := st.Take(context.Background(), store.Request{Key: keys[i], Policy: p, Cost: 0})
					if err != nil || res.Remaining != c.levels[i] || res.ResetAfter <= 0 || res.ResetAfter > 4*time.Hour {
						t.Errorf("%s: bucket %s at %+v, %v; want %d left", c.tenant, keys[i], res, err, c.levels[i])
					}
				}
			}
			quotaRoute(t, st)
		})
	}
}

// quotaRoute checks a route with a burst limit and a daily quota of 3 on
// st: three requests served, the fourth refused until the quota's next
// day on the server's clock.
func quotaRoute(t *testing.T, st store.Store) {
	t.Helper()
	mw, err := httplimit.New(httplimit.Config{Store: st, Prefix: redistest.Prefix(t) + "quota:", Key: httplimit.User(nil),
		Limits: []httplimit.Limit{
			{Name: "burst", Policy: algo.PerSecond(2).Burst(100)},
			{Name: "daily", Policy: algo.Quota(3, algo.Day, 0)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var ws []*httptest.ResponseRecorder
	for range 4 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(httplimit.WithUser(r.Context(), "acme")))
		ws = append(ws, w)
	}
	first, last := ws[0].Header(), ws[3].Header()
	if got := first.Get("RateLimit-Policy"); got != `"burst";q=100;w=50, "daily";q=3;w=86400` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if first.Get("X-RateLimit-Limit") != "3" || first.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("X-RateLimit %s/%s, want the quota's 2 of 3", first.Get("X-RateLimit-Remaining"), first.Get("X-RateLimit-Limit"))
	}
	secs, _ := strconv.Atoi(last.Get("Retry-After"))
	if ws[2].Code != 200 || ws[3].Code != 429 || secs < 1 || secs > 86400 || !strings.Contains(last.Get("RateLimit"), `"daily";r=0;t=`+last.Get("Retry-After")) {
		t.Errorf("3rd %d, 4th %d with Retry-After %q and RateLimit %q; want 429 until the next day", ws[2].Code, ws[3].Code,
			last.Get("Retry-After"), last.Get("RateLimit"))
	}
}
