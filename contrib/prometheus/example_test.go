package promobserver_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratebucket/ratebucket/algo"
	promobserver "github.com/ratebucket/ratebucket/contrib/prometheus"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/observe"
)

// One Observer on the caller's registry; the store wrapped with
// observe.Wrap; httplimit names each decision with the route pattern and
// the limit. Serve the registry with promhttp for Prometheus to scrape.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	obs, err := promobserver.New(reg, promobserver.Options{})
	if err != nil {
		panic(err)
	}
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		panic(err)
	}
	defer ms.Close()
	mw, err := httplimit.New(httplimit.Config{
		Store:  observe.Wrap(ms, "memory", obs),
		Limits: []httplimit.Limit{{Name: "burst", Policy: algo.PerHour(1).Burst(2)}},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /api/feed", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for range 3 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/feed", nil))
	}

	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == "ratebucket_decisions_total" && m.GetCounter().GetValue() > 0 {
				fmt.Print(f.GetName(), "{")
				for _, l := range m.GetLabel() {
					fmt.Printf("%s=%q,", l.GetName(), l.GetValue())
				}
				fmt.Println("}", m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// ratebucket_decisions_total{policy="burst",result="allowed",route="GET /api/feed",store="memory",} 2
	// ratebucket_decisions_total{policy="burst",result="denied",route="GET /api/feed",store="memory",} 1
}
