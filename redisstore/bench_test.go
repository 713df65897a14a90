package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// BenchmarkTake measures one Take (one round trip) on a local server with
// the server clock, on distinct keys and on one hot key, in parallel. The
// comparisons with other limiters live in the bench module.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(srv.Client(), redisstore.Config{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	p := algo.PerSecond(1000).Burst(100)
	var n atomic.Int64
	for _, bc := range []struct {
		name string
		key  func() string
	}{
		{"distinct keys", func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }},
		{"hot key", func() string { return "hot" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Take(context.Background(), bc.key(), p, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
