package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/store"
)

// prefixFits is the longest Prefix that Config.Prefix documents as fitting
// whatever the names.
const prefixFits = 125

var quiet = slog.New(slog.DiscardHandler)

// keysOf returns m's bucket keys for a request from 198.51.100.7.
func keysOf(t *testing.T, m *Middleware, edit ...func(*http.Request)) []string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/api/feed", nil)
	r.RemoteAddr = "198.51.100.7:1"
	for _, e := range edit {
		e(r)
	}
	keys, err := m.Keys(r)
	if err != nil {
		t.Fatalf("Keys: %v", err)
	}
	return keys
}

// TestKeyLengthBound: New refuses a configuration whose longest bucket key
// could exceed store.DefaultMaxKeyLen. At the bound, a request with the
// longest names, class and ID makes a key of exactly that length, which a
// memstore of the default MaxKeyLen takes and charges.
func TestKeyLengthBound(t *testing.T) {
	name := func(c string) string { return strings.Repeat(c, maxNameLen) }
	one := algo.PerMinute(1).Burst(1)
	longest := Limit{Name: name("n"), Policy: one}
	longKey := func(*http.Request) (Key, error) { return Key{Class: name("c"), ID: strings.Repeat("i", maxIDLen)}, nil }
	clk := newClock()
	st := newStore(t, clk)
	cfg := Config{Store: st, Clock: clk, Prefix: strings.Repeat("p", prefixFits), Limits: []Limit{longest}, Key: longKey}
	m := newMW(t, cfg)
	if keys := keysOf(t, m); len(keys[0]) != store.DefaultMaxKeyLen {
		t.Fatalf("longest key is %d bytes, want exactly %d: %q", len(keys[0]), store.DefaultMaxKeyLen, keys[0])
	}
	h := m.Handler(ok)
	if w := do(h, "198.51.100.7:1"); w.Code != 200 {
		t.Fatalf("a key of %d bytes: %d %s, want 200 from the store", store.DefaultMaxKeyLen, w.Code, w.Body)
	}
	if w := do(h, "198.51.100.7:1"); w.Code != 429 {
		t.Fatalf("second request: %d, want 429 (the first was charged)", w.Code)
	}

	// A hashed ID is shorter than maxIDLen: a 1 MB or binary ID stays
	// within the bound.
	for _, id := range []string{strings.Repeat("x", 1<<20), strings.Repeat("\x00", maxIDLen)} {
		huge := func(*http.Request) (Key, error) { return Key{Class: name("c"), ID: id}, nil }
		if keys := keysOf(t, newMW(t, Config{Store: st, Clock: clk, Prefix: cfg.Prefix, Limits: []Limit{longest}, Key: huge})); len(keys[0]) > store.DefaultMaxKeyLen {
			t.Errorf("ID of %d bytes: key of %d bytes", len(id), len(keys[0]))
		}
	}

	// One byte more, from the Prefix or a limit name, is
	// refused at New or With, never met by a request.
	wantTooLong := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, store.ErrKeyTooLong) {
			t.Errorf("%s: error %v, want ErrInvalidConfig and store.ErrKeyTooLong", what, err)
		}
	}
	over := cfg
	over.Prefix += "p"
	_, err := New(over)
	wantTooLong("Prefix one byte longer", err)
	short := longest
	short.Name = "n"
	over = cfg
	over.Prefix, over.Limits = strings.Repeat("p", prefixFits+maxNameLen-1), []Limit{short}
	m = newMW(t, over) // a short limit name leaves room for a longer Prefix
	_, err = m.With(Config{Limits: []Limit{short}})
	if err != nil {
		t.Errorf("WithLimits of the same limit: %v", err)
	}
	_, err = m.With(Config{Limits: []Limit{short, longest}})
	wantTooLong("WithLimits with a longer limit name", err)
}

// TestTierNeverInKey: a tier comes from the request, but no tier (nor a
// resolved plan's name) reaches a key: any tier, however long, is charged
// under the same key, and one without a policy is a resolution failure
// whose error stays short.
func TestTierNeverInKey(t *testing.T) {
	clk := newClock()
	huge := strings.Repeat("x", 1<<20)
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(IP),
		Limits: []Limit{{Name: "minute", Resolve: byTier(t, articleTiers)}}})
	plain, paid := keysOf(t, m, asUser("bob", "")), keysOf(t, m, asUser("bob", "paid"))
	if plain[0] != paid[0] || strings.Contains(paid[0], "paid") {
		t.Errorf("tier paid: key %q, want the no-tier key %q", paid[0], plain[0])
	}
	var ev events
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(IP), Observer: ev.Observe, Logger: quiet,
		Limits: []Limit{{Name: "minute", Resolve: byTier(t, articleTiers)}}}).Handler(ok)
	do(h, "198.51.100.7:1", asUser("bob", huge))
	if err := ev.last(t).Err; !errors.Is(err, ratebucket.ErrResolve) || len(err.Error()) > 200 {
		t.Errorf("error of %d bytes: %.300v; want ratebucket.ErrResolve, short", len(err.Error()), err)
	}
}

// TestStoreRefusesLongKey: a store configured with a smaller MaxKeyLen than
// the default refuses a key New let through. That is the request's fault,
// not an outage: 500 and Outcome Invalid, the FailMode is never asked (so
// it neither serves the request unlimited nor charges a fallback), and no
// bucket is charged, not even a limit whose key fits.
func TestStoreRefusesLongKey(t *testing.T) {
	clk := newClock()
	ls := []Limit{{Name: "a", Policy: algo.PerMinute(5).Burst(5)}, {Name: "a-longer-name", Policy: algo.PerDay(9).Burst(9)}}
	keys := keysOf(t, newMW(t, Config{Limits: ls}))
	if len(keys[1]) <= len(keys[0]) {
		t.Fatalf("keys %q: want the second longer", keys)
	}
	for _, c := range []struct {
		name   string
		limits []Limit
	}{{"one limit", ls[1:]}, {"TakeMulti, the first key fits", ls}} {
		t.Run(c.name, func(t *testing.T) {
			st, err := memstore.New(memstore.Config{Clock: clk, MaxKeyLen: len(keys[0])})
			if err != nil {
				t.Fatal(err)
			}
			var ev events
			failed := 0
			fail := FailMode(func(Failure) Verdict { failed++; return Verdict{Serve: true} })
			h := newMW(t, Config{Store: st, Clock: clk, Limits: c.limits, Fail: fail, Observer: ev.Observe, Logger: quiet}).Handler(ok)
			w := do(h, "198.51.100.7:1")
			if w.Code != 500 || body(t, w)["error"] != "rate_limit_misconfigured" {
				t.Errorf("got %d %s, want 500 rate_limit_misconfigured", w.Code, w.Body)
			}
			if e := ev.last(t); e.Outcome != Invalid || !errors.Is(e.Err, store.ErrKeyTooLong) {
				t.Errorf("event %+v, want Invalid with store.ErrKeyTooLong", e)
			}
			if failed != 0 || st.Len() != 0 {
				t.Errorf("FailMode asked %d times, %d buckets in the store; want none", failed, st.Len())
			}
		})
	}
}
