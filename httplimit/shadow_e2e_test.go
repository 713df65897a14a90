package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestRedisResolveAndShadow runs a route with a limit resolved per tenant
// and a shadow limit beside it on real Redis, standalone and Cluster: the
// tenant's plan decides, the shadow limit never refuses, and both buckets
// hold what the in-process tests pin.
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
			plans := map[string]store.Resolved{
				"acme":   {Policy: algo.PerHour(1).Burst(2), Name: "free"},
				"globex": {Policy: algo.PerHour(1).Burst(4), Name: "pro"},
			}
			shadow := algo.PerHour(1).Burst(3)
			mw, err := httplimit.New(httplimit.Config{Store: st, Prefix: redistest.Prefix(t), Key: httplimit.User,
				Limits: []httplimit.Limit{
					{Name: "plan", Resolve: httplimit.ResolveByID(func(_ context.Context, id string) (store.Resolved, error) {
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
					res, err := st.Take(context.Background(), keys[i], p, 0)
					if err != nil || res.Remaining != c.levels[i] || res.ResetAfter <= 0 || res.ResetAfter > 4*time.Hour {
						t.Errorf("%s: bucket %s at %+v, %v; want %d left", c.tenant, keys[i], res, err, c.levels[i])
					}
				}
			}
		})
	}
}
