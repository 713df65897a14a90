package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// newStore returns a store on rdb under a prefix unique to the test, with
// cfg's other fields as given.
func newStore(t testing.TB, rdb redis.UniversalClient, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = redistest.Prefix(t)
	}
	s, err := redisstore.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return newStore(t, rdb, redisstore.Config{Clock: clk})
	})
}

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		return newStore(t, rdb, redisstore.Config{Clock: clk})
	})
}
