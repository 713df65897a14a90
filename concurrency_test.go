package ratebucket_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// Two uploads of a user at once: a third waits for one to finish; a lease
// never released (its holder crashed) frees its slot when its TTL runs out.
func ExampleConcurrencyLimiter() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	lim, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{Limit: 2, TTL: time.Minute}, ratebucket.ConcurrencyConfig{Prefix: "upload:"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _ := lim.Acquire(ctx, "alice")
	clk.Add(10 * time.Second)
	second, _ := lim.Acquire(ctx, "alice")
	third, _ := lim.Acquire(ctx, "alice")
	fmt.Printf("allowed: %v %v %v; the third may retry after %v\n", first.Allowed, second.Allowed, third.Allowed, third.RetryAfter)

	released, _ := lim.Release(ctx, second)
	again, _ := lim.Release(ctx, second)
	fmt.Println("release:", released, "twice:", again)
	third, _ = lim.Acquire(ctx, "alice")
	fmt.Println("after the release:", third.Allowed)

	clk.Add(50 * time.Second) // the first holder never released: its lease expires
	fourth, _ := lim.Acquire(ctx, "alice")
	renewed, _ := lim.Renew(ctx, first)
	fmt.Println("after the first lease's TTL:", fourth.Allowed, "renew it:", renewed)
	// Output:
	// allowed: true true false; the third may retry after 50s
	// release: true twice: false
	// after the release: true
	// after the first lease's TTL: true renew it: false
}

func TestConcurrencyLimiter(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := algo.LeasePolicy{Limit: 1, TTL: time.Minute}

	if _, err := ratebucket.NewConcurrencyLimiter(nil, p, ratebucket.ConcurrencyConfig{}); !errors.Is(err, ratebucket.ErrNilStore) {
		t.Errorf("NewConcurrencyLimiter(nil) error %v, want ErrNilStore", err)
	}
	if _, err := ratebucket.NewConcurrencyLimiter(s, algo.LeasePolicy{}, ratebucket.ConcurrencyConfig{}); !errors.Is(err, algo.ErrInvalidLeasePolicy) {
		t.Errorf("NewConcurrencyLimiter(zero policy) error %v, want ErrInvalidLeasePolicy", err)
	}
	var zero ratebucket.ConcurrencyLimiter
	if _, err := zero.Acquire(ctx, "k"); !errors.Is(err, ratebucket.ErrNilStore) {
		t.Errorf("zero limiter Acquire error %v, want ErrNilStore", err)
	}

	a, _ := ratebucket.NewConcurrencyLimiter(s, p, ratebucket.ConcurrencyConfig{Prefix: "a:"})
	b, _ := ratebucket.NewConcurrencyLimiter(s, p, ratebucket.ConcurrencyConfig{Prefix: "b:"})
	if a.Policy() != p {
		t.Errorf("Policy() = %v, want %v", a.Policy(), p)
	}
	if _, err := a.Acquire(ctx, ""); !errors.Is(err, store.ErrEmptyKey) {
		t.Errorf("Acquire(\"\") error %v, want ErrEmptyKey", err)
	}
	la, err := a.Acquire(ctx, "k")
	if err != nil || !la.Allowed || la.Key != "k" || len(la.ID) != 26 {
		t.Fatalf("Acquire = %+v, %v; want admitted with a 26-character id", la, err)
	}
	if lb, _ := b.Acquire(ctx, "k"); !lb.Allowed {
		t.Fatalf("another prefix shares the key's slots: %+v", lb)
	}
	denied, _ := a.Acquire(ctx, "k")
	if denied.Allowed || denied.ID != "" || denied.RetryAfter != time.Minute {
		t.Fatalf("second Acquire at limit 1 = %+v, want denied with no id, retry after 1m", denied)
	}
	if ok, err := a.Release(ctx, denied); ok || err != nil {
		t.Fatalf("Release of a denied lease = %v, %v; want false, nil", ok, err)
	}
	// AcquireID with the held id renews it (a retried acquire); with another
	// id it is denied.
	if again, err := a.AcquireID(ctx, "k", la.ID); err != nil || !again.Allowed || again.ID != la.ID {
		t.Fatalf("AcquireID with the held id = %+v, %v; want admitted, the same lease", again, err)
	}
	if _, err := a.AcquireID(ctx, "k", ""); !errors.Is(err, algo.ErrInvalidLeaseID) {
		t.Fatalf("AcquireID with an empty id: %v, want ErrInvalidLeaseID", err)
	}
	clk.Add(59 * time.Second)
	if ok, err := a.Renew(ctx, la); !ok || err != nil {
		t.Fatalf("Renew of a live lease = %v, %v", ok, err)
	}
	clk.Add(59 * time.Second) // past the first TTL, within the renewed one
	if ok, err := a.Release(ctx, la); !ok || err != nil {
		t.Fatalf("Release of a renewed lease = %v, %v; want true", ok, err)
	}
	if ok, _ := a.Release(ctx, la); ok {
		t.Fatal("second Release reported true")
	}
	if ok, err := a.Release(ctx, ratebucket.Lease{Key: "k", ID: "never-acquired"}); ok || err != nil {
		t.Fatalf("Release of an unknown id = %v, %v; want false, nil", ok, err)
	}
}
