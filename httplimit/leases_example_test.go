package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/hybrid"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
)

// One global limit of 1000 requests a second shared by a fleet of 4
// instances: with Leases, each instance takes the hot key's tokens in
// batches, one store call each, and spends them locally. Close gives back
// what is left. (The store here is a memstore so that the example runs; in
// a fleet it is a redisstore.)
func ExampleMiddleware_Close() {
	shared, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	var calls atomic.Int64
	counted := observe.Wrap(shared, "shared", observe.Funcs{
		Decision: func(context.Context, observe.Decision) { calls.Add(1) },
	})
	global := func(*http.Request) (httplimit.Key, error) { return httplimit.Key{Class: "all", ID: "all"}, nil }
	mw, err := httplimit.New(httplimit.Config{
		Store:  counted,
		Limits: []httplimit.Limit{{Name: "global", Policy: algo.PerSecond(1000).Burst(1000), Key: global}},
		Leases: &hybrid.LeasesConfig{Instances: 4},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()

	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	admitted := 0
	for range 100 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code == http.StatusOK {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("fewer store calls than requests:", calls.Load() < 100)
	// Output:
	// admitted: 100
	// fewer store calls than requests: true
}
