package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
)

func TestKeyFuncs(t *testing.T) {
	anon := httptest.NewRequest(http.MethodGet, "/", nil)
	anon.RemoteAddr = "198.51.100.7:1"
	anon.Header.Set("X-User-Id", "admin") // client-supplied: must never count
	alice := anon.WithContext(WithUser(anon.Context(), "alice"))
	keyed := anon.Clone(context.Background())
	keyed.Header.Set("X-API-Key", "sk_live_secret")

	cases := []struct {
		name    string
		fn      KeyFunc
		r       *http.Request
		want    Key
		wantErr error
	}{
		{"User: authenticated", User(nil), alice, Key{"user", "alice"}, nil},
		{"User: anonymous has no key", User(nil), anon, Key{}, ErrNoKey},
		{"UserOr: authenticated", User(IP), alice, Key{"user", "alice"}, nil},
		{"UserOr: anonymous falls back to IP, ignoring X-User-Id", User(IP), anon, Key{"ip", "198.51.100.7"}, nil},
		{"APIKey: hashed", APIKey("x-api-key"), keyed, Key{"apikey", digest("sk_live_secret")}, nil},
		{"APIKey: missing", APIKey("X-API-Key"), anon, Key{}, ErrNoKey},
		{"IP", IP, anon, Key{"ip", "198.51.100.7"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, err := c.fn(c.r)
			if !errors.Is(err, c.wantErr) || k != c.want {
				t.Errorf("got %+v, %v; want %+v, %v", k, err, c.want, c.wantErr)
			}
		})
	}
	if strings.Contains(digest("sk_live_secret"), "secret") {
		t.Error("API key appears in its digest")
	}
	if _, ok := userFrom(WithUser(context.Background(), "")); ok {
		t.Error("an empty user id counts as authenticated")
	}
}

func TestBucketID(t *testing.T) {
	long := strings.Repeat("a", maxIDLen+1)
	for _, c := range []struct {
		name, id string
		hashed   bool
	}{
		{"plain", "alice", false},
		{"longest verbatim", long[:maxIDLen], false},
		{"too long", long, true},
		{"binary", "a\x00b", true},
		{"non-ASCII", "jörg", true},
		{"space", "a b", true},
		{"looks like a digest", digest("x"), true},
		{"hash tag braces", "{slot}", true},
	} {
		got := bucketID(c.id)
		if hashed := got != c.id; hashed != c.hashed {
			t.Errorf("%s: bucketID(%q) = %q, hashed %v, want %v", c.name, c.id, got, hashed, c.hashed)
		}
	}
}

// TestBucketIDProperties: every ID maps to a short printable string with no
// hash-tag braces, and distinct IDs to distinct strings (a verbatim ID never
// collides with a digest).
func TestBucketIDProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z#{}]{0,70}`)).Draw(t, "a")
		b := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z#{}]{0,70}`), rapid.Just(a)).Draw(t, "b")
		ga, gb := bucketID(a), bucketID(b)
		if len(ga) > maxIDLen || strings.ContainsAny(ga, "{} ") {
			t.Fatalf("bucketID(%q) = %q", a, ga)
		}
		for _, c := range []byte(ga) {
			if c < '!' || c > '~' {
				t.Fatalf("bucketID(%q) = %q: not printable", a, ga)
			}
		}
		if (a == b) != (ga == gb) {
			t.Fatalf("bucketID(%q) = %q, bucketID(%q) = %q", a, ga, b, gb)
		}
	})
}

// TestBucketKeysAreDistinct: under one Prefix two buckets share a key
// exactly when their limit, class and ID are all equal. Every
// combination of names that would meet under a careless layout (a limit
// "a" and class "b" against a class "a.b" or "ab"; a limit name equal to a
// class) and of IDs holding ':' (IPv6), '#', '%' or braces is tried. The ID is
// each key's hash tag.
func TestBucketKeysAreDistinct(t *testing.T) {
	type bucket struct{ limit, class, id string }
	names := []string{"a", "b", "ab", "a.b", "a-b", "a_b", "ip", "user"}
	ids := []string{"1", "a", "b", "b1", "a:b", "::1", "2001:db8::/64", "#1", "{1}", "a}b", "50%", "%23"}
	seen := map[string]bucket{}
	for _, limitName := range names {
		ls, err := newLimits([]Limit{{Name: limitName, Policy: defaultPolicy}}, defaultPrefix, IP)
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range names {
			for _, id := range ids {
				b := bucket{limitName, class, id}
				k := ls[0].bucketKey(class, bucketID(id))
				// Redis Cluster hashes what lies between the first '{'
				// and the next '}': the ID, so a client's buckets share
				// a slot.
				if l, r := strings.IndexByte(k, '{'), strings.IndexByte(k, '}'); l < 0 || r < l || k[l+1:r] != bucketID(id) {
					t.Fatalf("%+v: key %q, want the ID as its hash tag", b, k)
				}
				if other, ok := seen[k]; ok {
					t.Fatalf("%+v and %+v share the key %q", other, b, k)
				}
				seen[k] = b
			}
		}
	}
}

// TestKeyErrorsThroughMiddleware: an empty key is never a shared bucket.
func TestKeyErrorsThroughMiddleware(t *testing.T) {
	clk := newClock()
	st := &countingStore{Store: newStore(t, clk)}
	var ev events
	empty := func(*http.Request) (Key, error) { return Key{Class: "tenant"}, nil }
	badClass := func(*http.Request) (Key, error) { return Key{Class: "no spaces", ID: "x"}, nil }
	for _, c := range []struct {
		name   string
		key    KeyFunc
		status int
		code   string
		err    error
	}{
		{"anonymous on a user route", User(nil), 400, "rate_limit_key_missing", ErrNoKey},
		{"KeyFunc returned an empty ID", empty, 400, "rate_limit_key_missing", ErrNoKey},
		{"invalid class", badClass, 500, "rate_limit_misconfigured", ErrInvalidConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newMW(t, Config{Store: st, Clock: clk, Observer: ev.Observe, Key: c.key}).Handler(ok)
			w := do(h, "198.51.100.7:1")
			if w.Code != c.status || body(t, w)["error"] != c.code {
				t.Errorf("got %d %s, want %d %s", w.Code, w.Body, c.status, c.code)
			}
			if e := ev.last(t); e.Outcome != Invalid || !errors.Is(e.Err, c.err) {
				t.Errorf("event %+v, want Invalid with %v", e, c.err)
			}
		})
	}
	if n := st.calls.Load(); n != 0 {
		t.Errorf("%d store calls for requests without a key", n)
	}
}

// TestKeysKeepLimitsAndClassesApart: the same ID under two classes, and the
// same client under two limits, are different buckets.
func TestKeysKeepLimitsAndClassesApart(t *testing.T) {
	clk := newClock()
	st := newStore(t, clk)
	one := algo.PerMinute(1).Burst(1)
	idAsUser := newMW(t, Config{Store: st, Clock: clk, Key: User(nil), Limits: []Limit{{Policy: one}}}).Handler(ok)
	idAsIP := newMW(t, Config{Store: st, Clock: clk, Limits: []Limit{{Policy: one}}}).Handler(ok)
	other := newMW(t, Config{Store: st, Clock: clk, Limits: []Limit{{Name: "other", Policy: one}}}).Handler(ok)
	for name, h := range map[string]http.Handler{"user 198.51.100.7": idAsUser, "ip": idAsIP, "other limit": other} {
		if w := do(h, "198.51.100.7:1", asUser("198.51.100.7", "")); w.Code != 200 {
			t.Errorf("%s: %d, want 200 from its own bucket", name, w.Code)
		}
	}
}

func TestMiddlewareKeys(t *testing.T) {
	clk := newClock()
	m := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Key: User(IP), Limits: append(twoLimits()[:1:1], Limit{Name: "minute", Resolve: byTier(t, articleTiers)})})
	for _, c := range []struct {
		name string
		edit func(*http.Request)
		want []string
	}{
		{"anonymous", func(*http.Request) {}, []string{"h:burst:ip{198.51.100.7}", "h:minute:ip{198.51.100.7}"}},
		{"paid user: the tier is not in the key", asUser("42", "paid"), []string{"h:burst:user{42}", "h:minute:user{42}"}},
		{"odd user id, hashed", asUser("{x y}", ""), []string{"h:burst:user{" + digest("{x y}") + "}", "h:minute:user{" + digest("{x y}") + "}"}},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "198.51.100.7:1"
		c.edit(r)
		got, err := m.Keys(r)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: Keys = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if _, err := newMW(t, Config{Key: User(nil)}).Keys(httptest.NewRequest(http.MethodGet, "/", nil)); !errors.Is(err, ErrNoKey) {
		t.Errorf("anonymous on a user key: %v, want ErrNoKey", err)
	}
}
