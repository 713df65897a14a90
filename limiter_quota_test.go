package ratebucket_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestLimiterOverQuota: a Limiter over a calendar quota of 2 a day, at
// 22:00 UTC, on memstore and on a real redis-server (the mock as its
// client clock). Wait admits twice at once, then sleeps exactly until
// midnight, when the next day's count admits it; a deadline before
// midnight makes it answer ErrWouldExceedDeadline at once. Reserve and
// TakeAtMost, which a quota does not have, return an error wrapping
// algo.ErrQuotaUnsupported on both stores, and charge nothing. (Wait used
// to reserve, and so failed on every call under a quota.)
func TestLimiterOverQuota(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T, clk store.Clock) store.Store
	}{
		{"memstore", func(t *testing.T, clk store.Clock) store.Store {
			s, err := memstore.New(memstore.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T, clk store.Clock) store.Store {
			s, err := redisstore.New(redistest.Start(t).Client(), redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			clk := timerClock{Mock: clock.NewMock(), timers: make(chan time.Duration, 16)}
			clk.Set(time.Date(2026, 1, 1, 22, 0, 0, 0, time.UTC))
			lim, err := ratebucket.NewLimiter(tc.new(t, clk), algo.Quota(2, algo.Day, 0), ratebucket.Config{Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := lim.Reserve(ctx, "k", 1, time.Hour); !errors.Is(err, algo.ErrQuotaUnsupported) {
				t.Errorf("Reserve: %v, want algo.ErrQuotaUnsupported", err)
			}
			if _, _, err := lim.TakeAtMost(ctx, "k", 2); !errors.Is(err, algo.ErrQuotaUnsupported) {
				t.Errorf("TakeAtMost: %v, want algo.ErrQuotaUnsupported", err)
			}
			for i := range 2 {
				if res, err := lim.Wait(ctx, "k", 1); err != nil || !res.Allowed || res.Remaining != int64(1-i) {
					t.Fatalf("Wait %d: %+v, %v; want admitted at once, %d left (nothing charged before)", i, res, err, 1-i)
				}
			}
			if tc.name == "memstore" { // a mock's deadline is long past for a Redis client
				early, cancel := clk.WithTimeout(ctx, time.Hour)
				defer cancel()
				if res, err := lim.Wait(early, "k", 1); !errors.Is(err, ratebucket.ErrWouldExceedDeadline) || res.RetryAfter != 2*time.Hour {
					t.Fatalf("Wait with a deadline before midnight: %+v, %v; want ErrWouldExceedDeadline, RetryAfter 2h", res, err)
				}
			}
			done := make(chan error, 1)
			go func() {
				res, err := lim.Wait(ctx, "k", 1)
				if err == nil && (!res.Allowed || res.Remaining != 1) {
					err = errors.New("not admitted by the new day's count")
				}
				done <- err
			}()
			if d := <-clk.timers; d != 2*time.Hour {
				t.Fatalf("Wait sleeps %v, want 2h, until midnight", d)
			}
			clk.Add(2 * time.Hour)
			if err := <-done; err != nil {
				t.Fatalf("Wait at midnight: %v", err)
			}
		})
	}
}
