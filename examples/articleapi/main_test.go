package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
)

func newApp(t *testing.T, o options) http.Handler {
	t.Helper()
	st, err := memstore.New(memstore.Config{Clock: clock.NewMock()})
	if err != nil {
		t.Fatal(err)
	}
	if o.capacity == 0 {
		o.capacity, o.rate = 100, 2
	}
	h, err := newHandler(o, st)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/api/feed", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// count sends n requests and counts the 200s.
func count(h http.Handler, n int, remote string, header ...string) int {
	c := 0
	for range n {
		if get(h, remote, header...).Code == http.StatusOK {
			c++
		}
	}
	return c
}

func TestArticleAPI(t *testing.T) {
	for _, c := range []struct {
		name   string
		o      options
		header []string
		want   int // admitted of 150 from one IP, rotating user headers
	}{
		// x-user-id is ignored by default: rotating it buys nothing.
		{"x-user-id ignored", options{}, []string{"X-User-Id", ""}, 100},
		// Trusted (behind a gateway), each id has its own bucket.
		{"x-user-id trusted", options{trustUserHeader: true}, []string{"X-User-Id", ""}, 150},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newApp(t, c.o)
			got := 0
			for i := range 150 {
				if get(h, "192.0.2.1:1", c.header[0], string(rune('a'+i%26))+string(rune('a'+i/26))).Code == 200 {
					got++
				}
			}
			if got != c.want {
				t.Errorf("admitted %d of 150, want %d", got, c.want)
			}
		})
	}
}

func TestBearerTokens(t *testing.T) {
	h := newApp(t, options{tokens: "alice=s3cret", capacity: 3, rate: 1})
	if got := count(h, 5, "192.0.2.1:1", "Authorization", "Bearer s3cret"); got != 3 {
		t.Errorf("alice: admitted %d of 5, want 3", got)
	}
	if got := count(h, 5, "192.0.2.1:1"); got != 3 {
		t.Errorf("anonymous from the same IP: admitted %d of 5, want its own 3", got)
	}
	if w := get(h, "192.0.2.1:1", "Authorization", "Bearer wrong"); w.Code != http.StatusUnauthorized {
		t.Errorf("bad token: %d", w.Code)
	}
	if w := get(h, "192.0.2.1:1"); w.Body.String() != `{"error":"rate_limited","retry_after_ms":1000}`+"\n" {
		t.Errorf("429 body %q", w.Body)
	}
}

func TestTrustedProxy(t *testing.T) {
	h := newApp(t, options{trustProxies: "10.0.0.0/8", capacity: 2, rate: 1})
	for i, want := range []int{200, 200, 429} {
		if w := get(h, "10.0.0.2:1", "X-Forwarded-For", "198.51.100.1"); w.Code != want {
			t.Errorf("request %d via proxy: %d, want %d", i, w.Code, want)
		}
	}
	if w := get(h, "10.0.0.2:1", "X-Forwarded-For", "198.51.100.2"); w.Code != 200 {
		t.Errorf("another client via proxy: %d", w.Code)
	}
	if _, err := newHandler(options{trustProxies: "nonsense", capacity: 1, rate: 1}, nil); err == nil {
		t.Error("bad -trust-proxy accepted")
	}
}

// TestTwoInstancesOnRedis: two instances of the app on one Redis share the
// client's bucket.
func TestTwoInstancesOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	var apps []http.Handler
	for range 2 {
		st, closeStore, err := openStore("redis://" + srv.Addr + "/0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeStore)
		h, err := newHandler(options{capacity: 4, rate: 1, trustUserHeader: true}, st)
		if err != nil {
			t.Fatal(err)
		}
		apps = append(apps, h)
	}
	user := "u-" + redistest.Prefix(t) // unique on a shared REDIS_URL server
	got := 0
	for i := range 8 {
		if get(apps[i%2], "192.0.2.1:1", "X-User-Id", user).Code == http.StatusOK {
			got++
		}
	}
	if got != 4 {
		t.Errorf("two instances admitted %d of 8, want one burst of 4", got)
	}
	if _, _, err := openStore("mysql://nope"); err == nil {
		t.Error("bad -redis URL accepted")
	}
}
