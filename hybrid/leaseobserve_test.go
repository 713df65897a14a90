package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// leaseSums adds up the observe.LeaseBatch events an Observer receives.
type leaseSums struct {
	mu                                       sync.Mutex
	events, batches, taken, local, ret, lost int64
	stores                                   map[string]bool
}

func (s *leaseSums) observer() observe.Observer {
	return observe.Funcs{LeaseBatch: func(b observe.LeaseBatch) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.events++
		if b.Taken > 0 {
			s.batches++
		}
		s.taken += b.Taken
		s.local, s.ret, s.lost = s.local+b.Local, s.ret+b.Returned, s.lost+b.Lost
		if s.stores == nil {
			s.stores = map[string]bool{}
		}
		s.stores[b.Store] = true
	}}
}

// TestLeasesObserved: the LeaseBatch events of a Leases over memstore add
// up to its Stats once it is closed: batches taken, local admissions,
// tokens returned, and tokens lost when the store is gone. Each case
// ends a different way: a batch given back at Close; a batch spent to its
// last token (which nothing gives back, so only Local reports it); a
// batch whose refund fails.
func TestLeasesObserved(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		policy   algo.Policy
		takes    int
		closeMem bool // close the memstore before the Leases: the refund fails
	}{
		{"returned", algo.PerSecond(1000).Burst(1000), 200, false},
		{"spent out", algo.PerSecond(10).Burst(10), 30, false},
		{"lost", algo.PerSecond(1000).Burst(1000), 50, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := storetest.NewClock()
			ms, err := memstore.New(memstore.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			defer ms.Close()
			var sums leaseSums
			l := newLeases(t, ms, hybrid.LeasesConfig{Instances: 1, Lifetime: time.Second, SweepEvery: -1, Clock: clk,
				Observer: sums.observer(), Name: "hot"})
			for range tc.takes {
				if _, err := l.Take(ctx, store.Request{Key: "k", Policy: tc.policy, Cost: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.closeMem {
				ms.Close()
			}
			l.Close()
			st := l.Stats()
			t.Logf("%+v; events %d: batches %d, taken %d, local %d, returned %d, lost %d", st, sums.events, sums.batches, sums.taken, sums.local, sums.ret, sums.lost)
			if sums.batches != st.Batches || sums.local != st.Local || sums.ret != st.Returned || sums.lost != st.Lost {
				t.Errorf("events add up to batches %d, local %d, returned %d, lost %d; Stats say %+v", sums.batches, sums.local, sums.ret, sums.lost, st)
			}
			if st.Batches == 0 || st.Local == 0 || sums.taken != st.Local+st.Returned+st.Lost {
				t.Errorf("taken %d: want local %d + returned %d + lost %d, and some batches (%d)", sums.taken, st.Local, st.Returned, st.Lost, st.Batches)
			}
			if tc.closeMem != (st.Lost > 0) {
				t.Errorf("lost %d tokens", st.Lost)
			}
			if len(sums.stores) != 1 || !sums.stores["hot"] {
				t.Errorf("events named %v, want hot", sums.stores)
			}
		})
	}
}
