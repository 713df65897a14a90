package redisstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// batches records pipeline sizes and decisions.
type batches struct {
	observe.Funcs
	mu    sync.Mutex
	sizes []int
	ds    []observe.Decision
}

func (b *batches) ObservePipelineBatch(e observe.PipelineBatch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.Store != "limits" {
		panic("batch of store " + e.Store)
	}
	b.sizes = append(b.sizes, e.Size)
}

func (b *batches) ObserveDecision(_ context.Context, d observe.Decision) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ds = append(b.ds, d)
}

// TestObservePipelineBatches holds a pipeline in flight on a paused server
// while ten more calls queue behind it, and checks the sizes observed: the
// one in flight, then the ten together. Through observe.Wrap every
// decision is timed, since a Redis call takes far more than 10µs.
func TestObservePipelineBatches(t *testing.T) {
	rdb := heldClient(t, redistest.Start(t))
	obs := &batches{}
	rs := newStore(t, rdb, redisstore.Config{Timeout: patience, Observer: obs, Name: "limits",
		Pipeline: redisstore.PipelineConfig{Writers: 1, MaxBatch: 64}})
	s := observe.Wrap(rs, "limits", obs)
	p := algo.PerHour(1).Burst(10)
	ctx := observe.WithLabels(context.Background(), observe.Labels{Route: "GET /", Policy: "hourly"})
	unpause := pause(t, rdb)
	var wg sync.WaitGroup
	wg.Go(func() { s.Take(ctx, store.Request{Key: "first", Policy: p, Cost: 1}) })
	waitState(t, rs, 0, 1)
	for range 10 {
		wg.Go(func() { s.Take(ctx, store.Request{Key: "next", Policy: p, Cost: 1}) })
	}
	waitState(t, rs, 10, 1)
	unpause()
	wg.Wait()
	if want := []int{1, 10}; !slices.Equal(obs.sizes, want) {
		t.Fatalf("batch sizes %v, want %v", obs.sizes, want)
	}
	allowed := 0
	for _, d := range obs.ds {
		if !d.Timed || d.Latency <= 0 || d.Store != "limits" || d.Policy != "hourly" || d.Route != "GET /" {
			t.Errorf("decision %+v: want timed, labelled", d)
		}
		if d.Outcome == observe.OutcomeAllowed {
			allowed++
		}
	}
	if len(obs.ds) != 11 || allowed != 11 {
		t.Fatalf("%d decisions, %d allowed; want 11 of 11", len(obs.ds), allowed)
	}

	// Without pipelining there is no batch to report.
	obs.sizes = nil
	plain := newStore(t, rdb, redisstore.Config{Observer: obs, Name: "limits", Pipeline: redisstore.PipelineConfig{Disabled: true}})
	if _, err := plain.Take(ctx, store.Request{Key: "plain", Policy: p, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if len(obs.sizes) != 0 {
		t.Fatalf("batches %v with pipelining disabled", obs.sizes)
	}
}
