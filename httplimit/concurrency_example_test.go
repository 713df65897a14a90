package httplimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
)

// A slow route on which each client may have at most 2 requests in flight:
// while two reports of a client run, a third is refused with 429 and
// Retry-After, and served again once one of them returns.
func ExampleConcurrency() {
	mw, err := httplimit.New(httplimit.Config{}) // an in-process memstore keeps the leases
	if err != nil {
		fmt.Println(err)
		return
	}
	reports, err := mw.With(httplimit.Config{Concurrency: httplimit.Concurrency{
		Policy: algo.LeasePolicy{Limit: 2, TTL: 5 * time.Minute},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	running, finish := make(chan struct{}), make(chan struct{})
	h := reports.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("slow") {
			running <- struct{}{}
			<-finish // building the report
		}
		fmt.Fprintln(w, "report")
	}))
	done := make(chan int)
	for range 2 {
		go func() { done <- get(h, "/api/report?slow", "").Code }()
		<-running
	}
	w := get(h, "/api/report", "")
	fmt.Println("third at once:", w.Code, "Retry-After", w.Header().Get("Retry-After"))
	finish <- struct{}{}
	fmt.Println("first report:", <-done)
	fmt.Println("third again:", get(h, "/api/report", "").Code)
	finish <- struct{}{}
	fmt.Println("second report:", <-done)
	// Output:
	// third at once: 429 Retry-After 300
	// first report: 200
	// third again: 200
	// second report: 200
}
