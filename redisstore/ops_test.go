package redisstore_test

import (
	"errors"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestRefundMultiSlots: on a cluster, RefundMulti over keys of one group
// (store.GroupKey) refunds them together in one script call; over keys in
// different slots it fails with store.ErrNotTogether before Redis is
// called, refunding nothing.
func TestRefundMultiSlots(t *testing.T) {
	rdb := redistest.StartCluster(t).Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(1).Burst(10)
	together := []string{store.GroupKey("user:1", "burst"), store.GroupKey("user:1", "daily")}
	apart := []string{"a", "b"}
	if redisstore.Slot(s.Key(apart[0])) == redisstore.Slot(s.Key(apart[1])) {
		t.Fatal("the test wants keys in two slots")
	}
	for _, k := range append(together, apart...) {
		if res, err := s.Take(ctxT(t), k, p, 4); err != nil || !res.Allowed {
			t.Fatalf("Take(%q, 4) = %+v, %v", k, res, err)
		}
	}
	reqs := func(keys []string) []store.Request {
		return []store.Request{{Key: keys[0], Policy: p, Cost: 3}, {Key: keys[1], Policy: p, Cost: 1}}
	}
	if _, err := s.RefundMulti(ctxT(t), reqs(apart)); !errors.Is(err, store.ErrNotTogether) {
		t.Fatalf("RefundMulti across slots: %v, want store.ErrNotTogether", err)
	}
	res, err := s.RefundMulti(ctxT(t), reqs(together))
	if err != nil || res[0].Remaining != 9 || res[1].Remaining != 7 {
		t.Fatalf("RefundMulti in one group = %+v, %v; want 9 and 7 left", res, err)
	}
	for _, k := range apart {
		if res, err := s.Take(ctxT(t), k, p, 0); err != nil || res.Remaining != 6 {
			t.Fatalf("after the refused RefundMulti, %q = %+v, %v; want the 6 left it had", k, res, err)
		}
	}
}
