package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// pauses holds, at each of its points, the first goroutine that reaches
// it until the point is resumed; the others pass.
type pauses map[string]*pause

type pause struct {
	first   atomic.Bool // not a sync.Once: the others must not wait for the first
	reached chan struct{}
	resume  chan struct{}
	once    sync.Once
}

// pauseAt sets hook to hold the first goroutine at each of the points;
// hook is reset when the test ends.
func pauseAt(t *testing.T, points ...string) pauses {
	ps := pauses{}
	for _, at := range points {
		ps[at] = &pause{reached: make(chan struct{}), resume: make(chan struct{})}
	}
	hook = func(at string) {
		if p := ps[at]; p != nil && p.first.CompareAndSwap(false, true) {
			close(p.reached)
			<-p.resume
		}
	}
	t.Cleanup(func() { hook = nil })
	return ps
}

// resume lets the goroutine held at point at go on.
func (ps pauses) resume(at string) { p := ps[at]; p.once.Do(func() { close(p.resume) }) }

func newOneShard(t *testing.T) *Store {
	s, err := New(Config{Clock: storetest.NewClock(), Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// goTake takes 1 from key on its own goroutine and delivers the Result.
func goTake(t *testing.T, s *Store, key string, p algo.Policy) <-chan algo.Result {
	ch := make(chan algo.Result, 1)
	go func() {
		res, err := s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: 1})
		if err != nil {
			t.Error(err)
		}
		ch <- res
	}()
	return ch
}

func mustTake(t *testing.T, s *Store, key string, p algo.Policy, cost int64) algo.Result {
	t.Helper()
	res, err := s.Take(context.Background(), store.Request{Key: key, Policy: p, Cost: cost})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLockFreeTakeAcrossResize: a lock-free Take that read the table's
// array before a resize replaced it finds its key's old slot retired, and
// takes the shard's lock: the bucket is charged once, in the live array.
func TestLockFreeTakeAcrossResize(t *testing.T) {
	s := newOneShard(t)
	p := algo.PerHour(1).Burst(10)
	mustTake(t, s, "a", p, 1) // 9 left
	ps := pauseAt(t, "fast: view read")
	done := goTake(t, s, "a", p)
	<-ps["fast: view read"].reached
	sh := &s.shards[0]
	before := sh.b.view.Load()
	for i := 0; sh.b.view.Load() == before; i++ { // new keys until the array is replaced
		mustTake(t, s, fmt.Sprint("k", i), p, 1)
	}
	ps.resume("fast: view read")
	if res := <-done; !res.Allowed || res.Remaining != 8 {
		t.Fatalf("take across the resize = %+v, want admitted with 8 left", res)
	}
	if res := mustTake(t, s, "a", p, 0); res.Remaining != 8 {
		t.Fatalf("a holds %d after two takes, want 8: the paused take charged a retired slot", res.Remaining)
	}
}

// TestLockFreeTakeDuringShift: while a removal shifts a key back into the
// hole (its key and value copied, its new slot not yet published), a
// lock-free Take of that key finds it at its old slot, sees the shard's
// lock held, and leaves the slot to the lock: the update is not made at
// a slot about to be emptied.
func TestLockFreeTakeDuringShift(t *testing.T) {
	s := newOneShard(t)
	p := algo.PerHour(1).Burst(10)
	sh := &s.shards[0]
	b, a := sameHome(t, s)
	mustTake(t, s, b, p, 1)
	mustTake(t, s, a, p, 1) // 9 left
	if sh.b.find(s.hash(a), a) == sh.b.home(s.hash(a)) {
		t.Fatal("the second key is in its home slot: nothing to shift")
	}
	// The Take passes the first check of the shard's lock (not held)
	// and stops; the removal then takes the lock and stops with a copied;
	// the Take goes on, finds a at its old slot and locks it.
	ps := pauseAt(t, "fast: view read", "remove: slot copied", "fast: left to the lock")
	taken := goTake(t, s, a, p)
	<-ps["fast: view read"].reached
	refunded := make(chan error, 1)
	go func() { // fills b: the bucket is dropped, and a shifted into its slot
		_, err := s.Refund(context.Background(), store.Request{Key: b, Policy: p, Cost: 1})
		refunded <- err
	}()
	<-ps["remove: slot copied"].reached
	ps.resume("fast: view read")
	var res algo.Result
	select {
	case <-ps["fast: left to the lock"].reached: // it left the slot to the lock
		ps.resume("fast: left to the lock")
		ps.resume("remove: slot copied")
		res = <-taken
	case res = <-taken:
		t.Errorf("a lock-free take completed during the shift: %+v", res)
		ps.resume("remove: slot copied")
	}
	if err := <-refunded; err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || res.Remaining != 8 {
		t.Fatalf("take during the shift = %+v, want admitted with 8 left", res)
	}
	if res := mustTake(t, s, a, p, 0); res.Remaining != 8 {
		t.Fatalf("a holds %d after two takes, want 8", res.Remaining)
	}
}

// TestLockFreeTakeBeforeRemoval: a removal that must move a key whose
// slot a lock-free Take holds (past its check of the shard's lock) waits
// for the Take, and moves the bucket as the Take left it.
func TestLockFreeTakeBeforeRemoval(t *testing.T) {
	s := newOneShard(t)
	p := algo.PerHour(1).Burst(10)
	b, a := sameHome(t, s)
	mustTake(t, s, b, p, 1)
	mustTake(t, s, a, p, 1) // 9 left
	ps := pauseAt(t, "fast: passed the lock's check", "free: waiting", "remove: slot copied")
	taken := goTake(t, s, a, p)
	<-ps["fast: passed the lock's check"].reached
	refunded := make(chan error, 1)
	go func() {
		_, err := s.Refund(context.Background(), store.Request{Key: b, Policy: p, Cost: 1})
		refunded <- err
	}()
	select {
	case <-ps["free: waiting"].reached: // the removal waits for a's slot
	case <-ps["remove: slot copied"].reached:
		t.Error("the removal copied a slot a lock-free take holds")
	}
	ps.resume("fast: passed the lock's check")
	ps.resume("free: waiting")
	ps.resume("remove: slot copied")
	if err := <-refunded; err != nil {
		t.Fatal(err)
	}
	if res := <-taken; !res.Allowed || res.Remaining != 8 {
		t.Fatalf("take = %+v, want admitted with 8 left", res)
	}
	if res := mustTake(t, s, a, p, 0); res.Remaining != 8 {
		t.Fatalf("a holds %d after two takes, want 8: the removal moved it as it was before the take", res.Remaining)
	}
}

// sameHome returns two keys with one home slot in s's only shard: the
// second sits after the first, and removing the first shifts it back.
func sameHome(t *testing.T, s *Store) (first, second string) {
	sh := &s.shards[0]
	homes := map[uint64]string{}
	for i := 0; ; i++ {
		k := fmt.Sprint("key", i)
		home := s.hash(k) >> sh.b.shift
		if f, ok := homes[home]; ok {
			return f, k
		}
		homes[home] = k
	}
}

// TestLockFreeTakeAcrossClose: a lock-free Take that read the table's
// array before Close finds its key's slot retired and, at the shard's
// lock, a closed store: store.ErrClosed, nothing charged.
func TestLockFreeTakeAcrossClose(t *testing.T) {
	s := newOneShard(t)
	p := algo.PerHour(1).Burst(10)
	mustTake(t, s, "a", p, 1)
	ps := pauseAt(t, "fast: view read")
	errc := make(chan error, 1)
	go func() {
		_, err := s.Take(context.Background(), store.Request{Key: "a", Policy: p, Cost: 1})
		errc <- err
	}()
	<-ps["fast: view read"].reached
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ps.resume("fast: view read")
	if err := <-errc; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("take across Close = %v, want store.ErrClosed", err)
	}
}

// TestLockedOnlyWaitsForTakes: turning the lock-free Take off (as
// CountTakes does) waits for a Take that holds its slot past its checks,
// and afterwards the shards' holders no longer set their flag.
func TestLockedOnlyWaitsForTakes(t *testing.T) {
	s := newOneShard(t)
	p := algo.PerHour(1).Burst(10)
	mustTake(t, s, "a", p, 1) // 9 left
	ps := pauseAt(t, "fast: passed the lock's check", "free: waiting")
	taken := goTake(t, s, "a", p)
	<-ps["fast: passed the lock's check"].reached
	off := make(chan struct{})
	go func() { s.lockedOnly(); close(off) }()
	select {
	case <-ps["free: waiting"].reached: // it waits for a's slot
	case <-off:
		t.Error("lockedOnly returned while a lock-free take held a slot")
	}
	ps.resume("fast: passed the lock's check")
	ps.resume("free: waiting")
	<-off
	if res := <-taken; !res.Allowed || res.Remaining != 8 {
		t.Fatalf("take = %+v, want admitted with 8 left", res)
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	held := sh.mu.held.Load()
	sh.mu.Unlock()
	if s.fast.Load() || held {
		t.Fatalf("after lockedOnly: lock-free Takes on %v, the flag set under the lock %v; want neither", s.fast.Load(), held)
	}
	if res := mustTake(t, s, "a", p, 1); res.Remaining != 7 {
		t.Fatalf("a locked take after = %+v, want 7 left", res)
	}
}
