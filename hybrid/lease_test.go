package hybrid_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/observe"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// flakyLeases is flaky with leases, which fail too while it is down.
type flakyLeases struct{ flakyOps }

func (f flakyLeases) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	if err := f.fail(); err != nil {
		return algo.LeaseResult{}, err
	}
	return f.Store.AcquireLease(ctx, key, p, id)
}

func (f flakyLeases) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	if err := f.fail(); err != nil {
		return false, err
	}
	return f.Store.ReleaseLease(ctx, key, id)
}

func (f flakyLeases) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	if err := f.fail(); err != nil {
		return false, err
	}
	return f.Store.RenewLease(ctx, key, p, id)
}

// TestWrappersKeepLeases: an httplimit route with a Concurrency limit and
// a token-bucket limit runs on Fallback(DenyCache(memstore)): the third
// request in flight gets 429, a finished one frees its slot, and the leases
// live in the primary store.
func TestWrappersKeepLeases(t *testing.T) {
	clk := storetest.NewClock()
	primary := newMem(t, clk)
	cache := newCache(t, primary, hybrid.DenyCacheConfig{Clock: clk})
	fb := newOpsFallback(t, clk, cache, hybrid.LocalFallback)
	mw, err := httplimit.New(httplimit.Config{
		Store: fb, Clock: clk,
		Limits:      []httplimit.Limit{{Policy: algo.PerHour(100).Burst(100)}},
		Key:         func(*http.Request) (httplimit.Key, error) { return httplimit.Key{Class: "user", ID: "42"}, nil },
		Concurrency: httplimit.Concurrency{Policy: algo.LeasePolicy{Limit: 2, TTL: time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	serve := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		return rec.Code
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if code := serve(); code != http.StatusOK {
				t.Errorf("held request: %d", code)
			}
		})
		<-started
	}
	if code := serve(); code != http.StatusTooManyRequests {
		t.Fatalf("third in flight: %d, want 429", code)
	}
	close(release)
	wg.Wait()
	started = make(chan struct{}, 1)
	release = make(chan struct{})
	close(release)
	if code := serve(); code != http.StatusOK {
		t.Fatalf("after both finished: %d, want 200", code)
	}
	if st := fb.Stats(); st.Degraded != 0 || st.Failures != 0 {
		t.Fatalf("fallback %+v: want every lease call answered by the primary", st)
	}
}

// TestFallbackLeases: while the primary is down, an acquire is answered
// by the Mode (the local store under the policy's share, admitted with no
// lease, or ErrOpen); a lease taken locally is released locally, also
// once the primary is back; bad input is the caller's error in every mode
// and never counts against the primary.
func TestFallbackLeases(t *testing.T) {
	p := algo.LeasePolicy{Limit: 4, TTL: time.Minute}
	for _, mode := range []hybrid.Mode{hybrid.LocalFallback, hybrid.FailOpen, hybrid.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := storetest.NewClock()
			primary := flakyLeases{flakyOps{&flaky{Store: newMem(t, clk)}}}
			f, err := hybrid.NewFallback(primary, newMem(t, clk), hybrid.FallbackConfig{
				Mode: mode, Instances: 2, Clock: clk, Timeout: unhurried, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := f.AcquireLease(ctx, "k", p, "before"); err != nil || !res.Allowed || res.Remaining != 3 {
				t.Fatalf("acquire on the primary: %+v, %v", res, err)
			}
			primary.set(true, false)
			if _, err := f.AcquireLease(ctx, "k", algo.LeasePolicy{}, "x"); !errors.Is(err, algo.ErrInvalidLeasePolicy) {
				t.Fatalf("bad policy while down: %v", err)
			}
			if _, err := f.ReleaseLease(ctx, "k", ""); !errors.Is(err, algo.ErrInvalidLeaseID) {
				t.Fatalf("empty id while down: %v", err)
			}
			var got []algo.LeaseResult
			for _, id := range []string{"a", "b", "c"} {
				res, err := f.AcquireLease(ctx, "k", p, id)
				if mode == hybrid.FailClosed {
					if !errors.Is(err, hybrid.ErrOpen) {
						t.Fatalf("acquire %s: %v, want ErrOpen", id, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("acquire %s: %v", id, err)
				}
				got = append(got, res)
			}
			switch mode {
			case hybrid.LocalFallback: // the share of 2 instances: 2 in flight
				if !got[0].Allowed || !got[1].Allowed || got[2].Allowed || got[2].Limit != 2 {
					t.Fatalf("local acquires %+v; want 2 of the share of 2 admitted", got)
				}
			case hybrid.FailOpen:
				for _, r := range got {
					if !r.Allowed || r.Remaining != 3 {
						t.Fatalf("fail-open acquires %+v; want all admitted", got)
					}
				}
			}
			released, err := f.ReleaseLease(ctx, "k", "a")
			if mode == hybrid.LocalFallback {
				if err != nil || !released {
					t.Fatalf("local release while down: %v, %v", released, err)
				}
			} else if !errors.Is(err, hybrid.ErrOpen) {
				t.Fatalf("release while down: %v, %v; want ErrOpen", released, err)
			}
			if f.State() != observe.BreakerOpen {
				t.Fatalf("state %v, want open after the failures", f.State())
			}
			primary.set(false, false)
			clk.Add(hybrid.DefaultCoolDown)
			// Back: b was taken locally, and is released there through
			// the primary's "not held"; "before" is the primary's.
			for _, id := range []string{"b", "before"} {
				released, err := f.ReleaseLease(ctx, "k", id)
				want := mode == hybrid.LocalFallback || id == "before"
				if err != nil || released != want {
					t.Fatalf("release %s after recovery: %v, %v; want %v", id, released, err, want)
				}
			}
			if f.State() != observe.BreakerClosed {
				t.Fatalf("state %v after a probe succeeded, want closed", f.State())
			}
		})
	}
}
