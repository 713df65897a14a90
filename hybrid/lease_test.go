package hybrid_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestWrappersKeepNoLeases: DenyCache and Fallback wrap buckets only, so
// they are no store.Leaser, and an httplimit route with a Concurrency limit
// on one is refused at New with an error that names the wrapper; the
// route gets its leases from the primary store instead.
func TestWrappersKeepNoLeases(t *testing.T) {
	clk := storetest.NewClock()
	primary := newMem(t, clk)
	dc, err := hybrid.NewDenyCache(primary, hybrid.DenyCacheConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := hybrid.NewFallback(primary, newMem(t, clk), hybrid.FallbackConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	conc := httplimit.Concurrency{Policy: algo.LeasePolicy{Limit: 2, TTL: time.Minute}}
	for _, s := range []store.Store{dc, fb} {
		if _, ok := s.(store.Leaser); ok {
			t.Fatalf("%T is a store.Leaser: update httplimit's advice and this test", s)
		}
		_, err := httplimit.New(httplimit.Config{Store: s, Concurrency: conc})
		if !errors.Is(err, httplimit.ErrInvalidConfig) || !strings.Contains(err.Error(), "store.Leaser") || !strings.Contains(err.Error(), "hybrid.") {
			t.Fatalf("New(Concurrency on a %T) = %v; want ErrInvalidConfig naming store.Leaser and the wrapper", s, err)
		}
	}
	if _, err := httplimit.New(httplimit.Config{Store: primary, Concurrency: conc}); err != nil {
		t.Fatalf("New(Concurrency on the primary) = %v", err)
	}
}
