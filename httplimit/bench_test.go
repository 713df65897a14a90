package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// BenchmarkMiddleware measures the middleware's own cost over memstore: one
// admitted request with both header sets, per limit count. Keys vary over
// 1024 clients so the store really holds buckets.
func BenchmarkMiddleware(b *testing.B) {
	big := algo.PerSecond(algo.MaxPerSecond).Burst(algo.MaxCapacity / 1000)
	for _, n := range []int{1, 2} {
		b.Run(strconv.Itoa(n)+"-limits", func(b *testing.B) {
			limits := []Limit{{Name: "burst", Policy: big}, {Name: "daily", Policy: big}}[:n]
			m, err := New(Config{Store: newStore(b, newClock()), Limits: limits})
			if err != nil {
				b.Fatal(err)
			}
			serveBench(b, m)
		})
	}
}

// serveBench sends b.N admitted requests through m, from 1024 client
// addresses in turn, so the store really holds buckets.
func serveBench(b *testing.B, m *Middleware) {
	b.Helper()
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1"
	}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		clear(w.Header())
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkHeaders measures writeHeaders alone: both header sets for one
// and two limits, into a cleared header map.
func BenchmarkHeaders(b *testing.B) {
	now := newClock().Now()
	burst, daily := algo.PerSecond(10).Burst(100), algo.PerDay(10000).Burst(10000)
	res := algo.Result{Allowed: true, Remaining: 42, ResetAfter: 5800 * time.Millisecond}
	for _, n := range []int{1, 2} {
		b.Run(strconv.Itoa(n)+"-limits", func(b *testing.B) {
			d := Decision{Allowed: true, Limits: []LimitResult{
				{Name: "burst", Policy: burst, Result: res},
				{Name: "daily", Policy: daily, Result: res},
			}[:n]}
			h := http.Header{}
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				writeHeaders(h, DefaultHeaders, d, now)
			}
		})
	}
}
