package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// BenchmarkTake measures Take on a local server with the server clock, on
// distinct keys and on one hot key, at 1, 16 and 64 goroutines, with
// auto-pipelining on and off. At one goroutine each Take is one round
// trip either way; with more, pipelining answers many per round trip. The
// comparisons with other limiters live in the bench module.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	p := algo.PerSecond(1000).Burst(100)
	var n atomic.Int64
	keys := []struct {
		name string
		key  func() string
	}{
		{"distinct", func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }},
		{"hot", func() string { return "hot" }},
	}
	for _, pipe := range []bool{true, false} {
		s, err := redisstore.New(srv.Client(), redisstore.Config{
			Prefix:   redistest.Prefix(b),
			Pipeline: redisstore.PipelineConfig{Disabled: !pipe},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		for _, kc := range keys {
			for _, g := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("pipeline=%v/%s/g=%d", pipe, kc.name, g), func(b *testing.B) {
					b.ReportAllocs()
					parallel(b, g, func() error {
						_, err := s.Take(context.Background(), kc.key(), p, 1)
						return err
					})
				})
			}
		}
	}
}

// parallel runs f b.N times in total over g goroutines.
func parallel(b *testing.B, g int, f func() error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := f(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
