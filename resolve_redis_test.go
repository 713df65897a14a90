package ratebucket_test

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/observe/observetest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// TestLimiterResolveAndShadowOnRedis runs a resolving Limiter and a
// shadow Limiter on real Redis, standalone and Cluster, through a
// ResolverCache, and checks they answer what they answer on memstore.
func TestLimiterResolveAndShadowOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := redisstore.New(tc.client(t), redisstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var rec observetest.Recorder
			s := observe.Wrap(rs, "redis", &rec)
			db := newPlans()
			cache, err := ratebucket.NewResolverCache(db.resolve, ratebucket.CacheConfig{})
			if err != nil {
				t.Fatal(err)
			}
			prefix := redistest.Prefix(t)
			lim, err := ratebucket.NewLimiter(s, algo.Policy{}, ratebucket.Config{Prefix: prefix + "plan:", Resolver: cache.Resolve})
			if err != nil {
				t.Fatal(err)
			}
			shadow, err := ratebucket.NewLimiter(s, algo.PerMinute(1).Burst(3), ratebucket.Config{Prefix: prefix + "new:", Shadow: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var got []bool
			for _, tenant := range []string{"acme", "acme", "acme", "globex", "globex"} {
				res, err := lim.Allow(ctx, tenant)
				if err != nil {
					t.Fatal(err)
				}
				sh, err := shadow.Allow(ctx, "acme")
				if err != nil || !sh.Allowed {
					t.Fatalf("shadow Allow = %+v, %v; want always allowed", sh, err)
				}
				got = append(got, res.Allowed)
			}
			if want := []bool{true, true, false, true, true}; !slices.Equal(got, want) {
				t.Errorf("admitted %v, want %v (free: burst 2; pro: burst 5)", got, want)
			}
			var outcomes []string
			for _, d := range rec.Take() {
				outcomes = append(outcomes, d.Policy+":"+d.Outcome.String())
			}
			want := []string{"free:allowed", ":allowed", "free:allowed", ":allowed", "free:denied", ":allowed",
				"pro:allowed", ":shadow_denied", "pro:allowed", ":shadow_denied"}
			if !slices.Equal(outcomes, want) {
				t.Errorf("decisions\n %v\nwant\n %v", outcomes, want)
			}
			if st := cache.Stats(); st.Keys != 2 || st.Misses != 2 || st.Hits != 3 {
				t.Errorf("cache %+v, want 2 keys, 2 misses, 3 hits", st)
			}
		})
	}
}
