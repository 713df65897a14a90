package hybrid_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// maxTakeFrames is the most frames of ours between httplimit's call of the
// store and go-redis's, for a Take through DenyCache and Fallback to a
// synchronous redisstore in the common case (a DenyCache miss, the breaker
// closed): DenyCache.Take, Fallback.Take, Store.Take, run, send. Issue 28
// counted 10 before the wrappers were flattened (takeFrom and guard
// indirections, a closure, a primary bool carried back up).
const maxTakeFrames = 6

// TestTakeGoesStraightDown stacks httplimit -> DenyCache -> Fallback ->
// redisstore on a real Redis and counts, at the EVALSHA (a go-redis hook),
// the frames of ours between httplimit's Middleware.take and go-redis. The
// synchronous store must stay within maxTakeFrames; the auto-pipelined
// one, whose caller writes its own pipeline when no writer is running, is
// logged.
func TestTakeGoesStraightDown(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		pipelined bool
		cacheOut  bool // DenyCache over Fallback, else Fallback over DenyCache
	}{
		{"DenyCache>Fallback/sync", false, true},
		{"Fallback>DenyCache/sync", false, false},
		{"DenyCache>Fallback/pipelined", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &frameRecorder{}
			rdb := srv.Client()
			rdb.AddHook(rec)
			clk := storetest.NewClock()
			rs, err := redisstore.New(rdb, redisstore.Config{Prefix: redistest.Prefix(t), Clock: clk,
				Pipeline: redisstore.PipelineConfig{Disabled: !tc.pipelined}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			fallback := func(primary store.Store) store.Store {
				fb, err := hybrid.NewFallback(primary, newMem(t, clk), hybrid.FallbackConfig{Clock: clk, Timeout: unhurried})
				if err != nil {
					t.Fatal(err)
				}
				return fb
			}
			var s store.Store
			if tc.cacheOut {
				s = newCache(t, fallback(rs), hybrid.DenyCacheConfig{Clock: clk})
			} else {
				s = fallback(newCache(t, rs, hybrid.DenyCacheConfig{Clock: clk}))
			}
			mw, err := httplimit.New(httplimit.Config{Store: s, Clock: clk,
				Limits: []httplimit.Limit{{Policy: algo.PerSecond(100).Burst(100)}}})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for range 3 {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				if w.Code != http.StatusOK {
					t.Fatalf("status %d, want 200", w.Code)
				}
			}
			frames, path := rec.result(t)
			t.Logf("%d frames of ours from httplimit to EVALSHA: %s", frames, path)
			if !tc.pipelined && frames > maxTakeFrames {
				t.Errorf("a Take went through %d frames of ours to EVALSHA, want at most %d: %s", frames, maxTakeFrames, path)
			}
		})
	}
}

// frameRecorder is a go-redis hook that keeps the call stack at the last
// script call it saw.
type frameRecorder struct {
	mu  sync.Mutex
	pcs []uintptr
}

func (r *frameRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *frameRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (r *frameRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.record(cmds)
		return next(ctx, cmds)
	}
}

func (r *frameRecorder) record(cmds []redis.Cmder) {
	for _, c := range cmds {
		if n := strings.ToLower(c.Name()); n == "evalsha" || n == "eval" || n == "fcall" {
			pcs := make([]uintptr, 128)
			pcs = pcs[:runtime.Callers(2, pcs)]
			r.mu.Lock()
			r.pcs = pcs
			r.mu.Unlock()
			return
		}
	}
}

// result counts the frames of this module strictly between httplimit's
// Middleware.take and the first go-redis frame of the last stack recorded,
// and names them outermost first.
func (r *frameRecorder) result(t *testing.T) (int, string) {
	t.Helper()
	r.mu.Lock()
	pcs := r.pcs
	r.mu.Unlock()
	if pcs == nil {
		t.Fatal("no script call was seen")
	}
	var names []string // innermost first
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		names = append(names, f.Function)
		if !more {
			break
		}
	}
	take := -1
	for i, n := range names {
		if strings.HasSuffix(n, "httplimit.(*Middleware).take") {
			take = i
			break
		}
	}
	if take < 0 {
		t.Fatalf("httplimit's take is not on the stack at the script call:\n%s", strings.Join(names, "\n"))
	}
	var ours []string
	for i := take - 1; i >= 0 && !strings.HasPrefix(names[i], "github.com/redis/go-redis/"); i-- {
		if n := names[i]; strings.HasPrefix(n, "github.com/ratebucket/ratebucket/") {
			ours = append(ours, strings.TrimPrefix(n, "github.com/ratebucket/ratebucket/"))
		}
	}
	return len(ours), strings.Join(ours, " > ")
}
