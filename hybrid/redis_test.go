package hybrid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestRedisWrappers runs both wrappers over redisstore on a real Redis
// (client clock: the suite's manual clock) through the conformance suite:
// DenyCache(redisstore) and Fallback(DenyCache(redisstore), memstore).
func TestRedisWrappers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	newRedis := func(t *testing.T, clk store.Clock) store.Store {
		s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("DenyCache", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
			skipBackwards(t)
			return newCache(t, newRedis(t, clk), hybrid.DenyCacheConfig{Clock: clk})
		})
	})
	t.Run("Fallback over DenyCache", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
			skipBackwards(t)
			f, err := hybrid.NewFallback(newCache(t, newRedis(t, clk), hybrid.DenyCacheConfig{Clock: clk}),
				newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return f
		})
	})
}

// skipBackwards skips the suite's Backwards check for stores with a
// DenyCache: a local denial does not advance the primary's stamp, so with
// a clock that steps back the cache is stricter than the plain store, never
// looser, which TestDenyCacheTwin checks instead.
func skipBackwards(t *testing.T) {
	if strings.HasSuffix(t.Name(), "/Backwards") {
		t.Skip("a local denial does not advance the primary's stamp: with a clock that steps back " +
			"the cache is stricter than the plain store, never looser (TestDenyCacheTwin)")
	}
}

// TestRedisAbusiveClient: the abusive client against redisstore, once with
// the client clock and no margin, once with Redis's own server clock and
// the default margin (real time: a second of it, until two tokens have
// refilled). Both give the plain store's decisions; the server-clock run
// reports its call reduction.
func TestRedisAbusiveClient(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	p := algo.PerSecond(2).Burst(100)
	t.Run("client clock", func(t *testing.T) {
		clk := storetest.NewClock()
		mk := func(prefix string) store.Store {
			s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t) + prefix, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		c := newCache(t, mk("cached:"), hybrid.DenyCacheConfig{Clock: clk, ClockMargin: -1})
		reqs, admitted := abuse(t, clk, c, mk("plain:"), p, time.Minute)
		st := c.Stats()
		t.Logf("client clock, 1 simulated minute: %d requests, %d admitted, %d Redis calls (%.2f%% fewer)",
			reqs, admitted, st.Calls, 100*(1-float64(st.Calls)/float64(reqs)))
		if st.Calls > admitted+1 {
			t.Errorf("%d calls for %d admissions", st.Calls, admitted)
		}
	})
	t.Run("server clock", func(t *testing.T) {
		s, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		c := newCache(t, s, hybrid.DenyCacheConfig{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing run
		defer cancel()
		start, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Until two refilled tokens were admitted after the burst: about a
		// second of Redis's clock, however busy this machine is.
		var reqs, admitted int64
		for ; admitted < p.Capacity()+2; reqs++ {
			res, err := c.Take(ctx, store.Request{Key: "abuser", Policy: p, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				admitted++
			}
		}
		end, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		elapsed := end.Sub(start)
		if law := p.Capacity() + p.Rate().Tokens*elapsed.Microseconds()/p.Rate().Period.Microseconds(); admitted > law {
			t.Errorf("admitted %d in %v of Redis time, more than the law %d", admitted, elapsed, law)
		}
		st := c.Stats()
		// A call per admission, plus the calls made within the 1.25ms of
		// margin and drift before each of the two refilled tokens:
		// sequential calls, each at least a round trip, so at most
		// 1.25ms / the fastest round trip each (a few dozen on an idle
		// machine); every other request is denied locally.
		fastest := time.Hour
		for range 50 {
			t0 := time.Now()
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			fastest = min(fastest, time.Since(t0))
		}
		window := 1250 * time.Microsecond
		if bound := admitted + 2*int64(window/max(fastest, time.Microsecond)+1); st.Calls > bound || st.Calls+st.Denied != reqs || st.Denied == 0 {
			t.Errorf("%d requests, %d admitted, %d calls (at most %d with round trips of %v), %d denied locally", reqs, admitted, st.Calls, bound, fastest, st.Denied)
		}
		t.Logf("server clock, %v of Redis time: %d requests, %d admitted, %d Redis calls (%.2f%% fewer)",
			elapsed, reqs, admitted, st.Calls, 100*(1-float64(st.Calls)/float64(reqs)))
	})
}
