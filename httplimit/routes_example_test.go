package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/httplimit"
	"github.com/ratebucket/ratebucket/memstore"
)

// Routes with a limit of their own: each route's handler is wrapped by its
// middleware once, and the mux is served as it is. This is the wiring the
// README and the package doc show; the counts below are what a client gets
// from it in one burst (no time passes on the mock clock).
func ExampleMiddleware_With_routes() {
	st, _ := memstore.New(memstore.Config{Clock: clock.NewMock()})
	ok := func(w http.ResponseWriter, r *http.Request) {}
	feed, logIn, uploadFile := http.HandlerFunc(ok), http.HandlerFunc(ok), http.HandlerFunc(ok)

	mw, err := httplimit.New(httplimit.Config{
		Store:  st, // a memstore, or a redisstore to share the limit across instances
		Key:    httplimit.User(httplimit.IP),
		Limits: []httplimit.Limit{{Policy: algo.PerMinute(60).Burst(10)}},
	})
	login, err := mw.With(httplimit.Config{Fail: httplimit.FailClosed(time.Second)})
	upload, err := mw.With(httplimit.Config{Cost: 10})

	mux := http.NewServeMux()
	mux.Handle("GET /feed", mw.Handler(feed))
	mux.Handle("POST /login", login.Handler(logIn))
	mux.Handle("POST /upload", upload.Handler(uploadFile))
	srv := &http.Server{Addr: ":8080", Handler: mux} // not mw.Handler(mux): that would charge every route twice

	if err != nil {
		fmt.Println(err)
		return
	}
	admitted := func(method, path, client string) (n int) {
		for range 20 {
			r := httptest.NewRequest(method, path, nil)
			r.RemoteAddr = client + ":40000"
			w := httptest.NewRecorder()
			srv.Handler.ServeHTTP(w, r)
			if w.Code == http.StatusOK {
				n++
			}
		}
		return n
	}
	fmt.Println("POST /login:", admitted(http.MethodPost, "/login", "192.0.2.1"), "of 20")
	fmt.Println("POST /upload:", admitted(http.MethodPost, "/upload", "192.0.2.2"), "of 20")
	fmt.Println("GET /feed:", admitted(http.MethodGet, "/feed", "192.0.2.3"), "of 20")
	// Output:
	// POST /login: 10 of 20
	// POST /upload: 1 of 20
	// GET /feed: 10 of 20
}
