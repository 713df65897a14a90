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

// modes are the store's two ways of sending scripts: auto-pipelined (the
// default) and one call per round trip.
var modes = []struct {
	name string
	cfg  redisstore.PipelineConfig
}{
	{"pipelined", redisstore.PipelineConfig{}},
	{"direct", redisstore.PipelineConfig{Disabled: true}},
}

func TestConformanceStandalone(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	conform(t, redistest.Start(t).Client())
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel() // a cluster of its own, CPU-bound: runs beside the others
	conform(t, redistest.StartCluster(t).Client())
}

// conform runs storetest against stores on rdb in every mode.
func conform(t *testing.T, rdb redis.UniversalClient) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
				// Timeout: the default second is real time, which a
				// queued call can outwait on a busy machine.
				return newStore(t, rdb, redisstore.Config{Clock: clk, Timeout: patience, Pipeline: m.cfg})
			})
		})
	}
}
