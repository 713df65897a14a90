package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestRefusedAndHungRedis: the wrappers over redisstore whose Redis
// refuses connections (a loopback port nothing listens on) or hangs (a
// listener that never answers the handshake). Each call answers with the
// store's error, which matches redisstore.ErrNotSent (the DenyCache passes
// it on, a fail-closed Fallback wraps it in ErrOpen), or from the local
// store (LocalFallback), for takes and leases alike: when refused well
// within the Timeout (the client dials once), when hung at the Timeout
// (the Fallback's, the primary's deadline, or the store's), plus 10 ms.
// The fastest of 3 tries counts: two shared cores under -race can hold a
// goroutine back for longer than that; none may take a second more.
func TestRefusedAndHungRedis(t *testing.T) {
	const timeout = 150 * time.Millisecond
	p, lp := algo.PerHour(1).Burst(10), algo.LeasePolicy{Limit: 2, TTL: time.Minute}
	notSent := func(err error) bool { return errors.Is(err, redisstore.ErrNotSent) }
	open := func(err error) bool { return notSent(err) && errors.Is(err, hybrid.ErrOpen) }
	take := func(s store.Store) error {
		_, err := s.Take(context.Background(), store.Request{Key: "k", Policy: p, Cost: 1})
		return err
	}
	lease := func(s store.Store) error {
		_, err := s.AcquireLease(context.Background(), "k", lp, "id")
		return err
	}
	local := func(s store.Store) error {
		res, err := s.Take(context.Background(), store.Request{Key: "k", Policy: p, Cost: 1})
		if err == nil && !res.Allowed {
			err = errors.New("denied: want the local share's admission")
		}
		return err
	}
	fallback := func(mode hybrid.Mode) func(*testing.T, store.Store) store.Store {
		return func(t *testing.T, primary store.Store) store.Store {
			f, err := hybrid.NewFallback(primary, newMem(t, nil), hybrid.FallbackConfig{Mode: mode, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	deny := func(t *testing.T, primary store.Store) store.Store {
		return newCache(t, primary, hybrid.DenyCacheConfig{})
	}
	wrappers := []struct {
		name string
		wrap func(*testing.T, store.Store) store.Store
		call func(store.Store) error
		ok   func(error) bool
	}{
		{"DenyCache take", deny, take, notSent},
		{"DenyCache lease", deny, lease, notSent},
		{"fail-closed Fallback take", fallback(hybrid.FailClosed), take, open},
		{"fail-closed Fallback lease", fallback(hybrid.FailClosed), lease, open},
		{"local Fallback take", fallback(hybrid.LocalFallback), local, func(err error) bool { return err == nil }},
	}
	servers := []struct {
		name  string
		addr  func(testing.TB) string
		limit time.Duration
	}{
		{"refused", redistest.RefusedAddr, timeout},
		{"hung", redistest.HungAddr, timeout + 10*time.Millisecond},
	}
	for _, srv := range servers {
		addr := srv.addr(t)
		for _, pipe := range []redisstore.PipelineConfig{{}, {Disabled: true}} {
			for _, w := range wrappers {
				t.Run(srv.name+"/"+map[bool]string{false: "pipelined", true: "direct"}[pipe.Disabled]+"/"+w.name, func(t *testing.T) {
					rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1})
					defer rdb.Close()
					rs, err := redisstore.New(rdb, redisstore.Config{Timeout: timeout, Pipeline: pipe})
					if err != nil {
						t.Fatal(err)
					}
					defer rs.Close()
					s := w.wrap(t, rs)
					best := time.Hour
					for range 3 {
						start := time.Now()
						err := w.call(s)
						d := time.Since(start)
						best = min(best, d)
						if !w.ok(err) || d > timeout+time.Second {
							t.Errorf("call = %v after %v", err, d)
						}
					}
					t.Logf("fastest of 3 calls: %v (limit %v)", best.Round(100*time.Microsecond), srv.limit)
					if best > srv.limit {
						t.Errorf("the fastest of 3 calls took %v, want at most %v", best, srv.limit)
					}
				})
			}
		}
	}
}
