package httplimit

import (
	"context"
	"testing"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// BenchmarkPolicies measures what a resolved policy and a shadow limit
// add to an admitted request, over memstore and over a real redis-server
// (one request at a time: a shadow limit is a store call of its own):
//
//	go test -run '^$' -bench Policies -benchmem ./httplimit/
//
// static is one limit with its own policy; resolved-cached the same
// policy answered per client through a warm ratebucket.ResolverCache;
// resolved-direct from a map, with no cache; shadow adds a shadow limit;
// 2-limits adds an enforced one instead (one atomic take of both).
func BenchmarkPolicies(b *testing.B) {
	big := algo.PerSecond(algo.MaxPerSecond).Burst(algo.MaxCapacity / 1000)
	direct := func(context.Context, string) (ratebucket.Resolved, error) {
		return ratebucket.Resolved{Policy: big, Name: "pro"}, nil
	}
	cache, err := ratebucket.NewResolverCache(direct, ratebucket.CacheConfig{})
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name   string
		limits []Limit
	}{
		{"static", []Limit{{Name: "burst", Policy: big}}},
		{"resolved-cached", []Limit{{Name: "burst", Resolve: cache}}},
		{"resolved-direct", []Limit{{Name: "burst", Resolve: ratebucket.Resolver(direct)}}},
		{"shadow", []Limit{{Name: "burst", Policy: big}, {Name: "new", Policy: big, Shadow: true}}},
		{"2-limits", []Limit{{Name: "burst", Policy: big}, {Name: "new", Policy: big}}},
	}
	stores := []struct {
		name string
		new  func(b *testing.B) store.Store
	}{
		{"memstore", func(b *testing.B) store.Store { return newStore(b, newClock()) }},
		{"redis", func(b *testing.B) store.Store {
			s, err := redisstore.New(redistest.Start(b).Client(), redisstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.new(b)
			for _, c := range cases {
				b.Run(c.name, func(b *testing.B) {
					m, err := New(Config{Store: s, Limits: c.limits, Prefix: "bench:" + c.name + ":"})
					if err != nil {
						b.Fatal(err)
					}
					serveBench(b, m)
				})
			}
		})
	}
}
