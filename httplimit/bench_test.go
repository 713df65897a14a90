package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

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
