package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

// TestSentinelFailover: a store on a go-redis failover client (one master,
// one replica, three sentinels) while four goroutines take from twenty
// buckets, and the master is killed (SIGKILL). Calls fail, each within the
// store's Timeout, for a bounded time; then they succeed against the
// promoted replica, with the buckets it had replicated: twenty charged
// and replicated (WAIT) before the kill are exactly as they were; of the
// charges made during the traffic, those the master acknowledged but had
// not yet sent to the replica are lost (counted and logged: asynchronous
// replication's loss), and none is counted twice.
func TestSentinelFailover(t *testing.T) {
	st := redistest.StartSentinel(t)
	s := newStore(t, st.Client(), redisstore.Config{Timeout: 300 * time.Millisecond})
	p := algo.PerHour(1).Burst(1000) // no whole token refills during the test
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := st.Master(t)

	for i := range 20 {
		if _, err := s.Take(ctx, store.Request{Key: fmt.Sprint("before", i), Policy: p, Cost: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.Node(old).Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d, %v; want the replica to have every charge", n, err)
	}

	var (
		mu                 sync.Mutex
		acked              = map[string]int64{} // admitted takes per key
		oks, errs, after   int                  // after: successes of calls begun after the failover
		killed, failedOver time.Time
		firstErr, lastErr  time.Time
		recovered          time.Time // the first success of a call begun after the kill
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += 4 {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprint("during", i%20)
				begun := time.Now()
				res, err := s.Take(ctx, store.Request{Key: key, Policy: p, Cost: 1})
				mu.Lock()
				switch {
				case err != nil:
					errs++
					if firstErr.IsZero() {
						firstErr = time.Now()
					}
					lastErr = time.Now()
				case res.Allowed:
					oks++
					acked[key]++
					if !killed.IsZero() && begun.After(killed) && recovered.IsZero() {
						recovered = time.Now()
					}
					if !failedOver.IsZero() && begun.After(failedOver) {
						after++
					}
				}
				mu.Unlock()
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(time.Minute); ; {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("no %s within a minute", what)
			}
			time.Sleep(time.Millisecond) // polls the workers' progress; times nothing
		}
	}
	waitFor("traffic", func() bool { return oks >= 200 })
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	st.Kill(t, old)
	promoted := st.WaitFailover(t, old, 30*time.Second)
	mu.Lock()
	failedOver = time.Now()
	mu.Unlock()
	waitFor("traffic on the new master", func() bool { return after >= 200 })
	close(stop)
	wg.Wait()

	gap := recovered.Sub(killed)
	if firstErr.IsZero() || gap <= 0 || gap > 30*time.Second {
		t.Fatalf("first error at %v, first success after the kill %v after it; want errors, then success within 30 s", firstErr, gap)
	}
	for i := range 20 {
		b, err := s.Inspect(ctx, fmt.Sprint("before", i), p)
		if err != nil || b.Tokens != 1000-int64(i+1) {
			t.Fatalf("replicated bucket %d on the new master = %+v, %v; want %d tokens", i, b, err, 1000-(i+1))
		}
	}
	var lost, ackedAll int64
	for i := range 20 {
		key := fmt.Sprint("during", i)
		b, err := s.Inspect(ctx, key, p)
		if err != nil {
			t.Fatal(err)
		}
		kept := 1000 - b.Tokens
		if kept > acked[key]+int64(errs) {
			t.Fatalf("%s holds %d charges, more than the %d admitted and %d failed calls", key, kept, acked[key], errs)
		}
		lost += max(0, acked[key]-kept)
		ackedAll += acked[key]
	}
	t.Logf("master %s killed; sentinels promoted %s after %v; calls failed from %v to %v after the kill (%d failed calls), first success %v after it",
		old, promoted, failedOver.Sub(killed).Round(time.Millisecond), firstErr.Sub(killed).Round(time.Millisecond),
		lastErr.Sub(killed).Round(time.Millisecond), errs, gap.Round(time.Millisecond))
	t.Logf("asynchronous replication lost %d of %d admitted charges (the master acknowledged them, the replica never had them)", lost, ackedAll)
}
