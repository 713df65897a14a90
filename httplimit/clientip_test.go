package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func mustPrefixes(t *testing.T, s ...string) []string { return s }

func TestClientIP(t *testing.T) {
	proxies := mustPrefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.200")
	xff := IPConfig{TrustedProxies: proxies}
	fwd := IPConfig{TrustedProxies: proxies, Header: "Forwarded"}
	cases := []struct {
		name   string
		cfg    IPConfig
		remote string
		xff    []string // X-Forwarded-For lines
		fwd    []string // Forwarded lines
		want   string   // Key.ID
	}{
		{"default: the peer", IPConfig{}, "198.51.100.7:5555", nil, nil, "198.51.100.7"},
		{"default: forged X-Forwarded-For ignored", IPConfig{}, "198.51.100.7:5555", []string{"1.2.3.4"}, nil, "198.51.100.7"},
		{"default: forged Forwarded ignored", IPConfig{}, "198.51.100.7:5555", nil, []string{"for=1.2.3.4"}, "198.51.100.7"},
		{"untrusted peer: forged header ignored though proxies are configured", xff, "198.51.100.7:5555", []string{"10.0.0.1, 1.2.3.4"}, nil, "198.51.100.7"},
		{"trusted peer: the right-most entry", xff, "10.1.1.1:80", []string{"198.51.100.7"}, nil, "198.51.100.7"},
		{"trusted peer: client-written entries left of the real one ignored", xff, "10.1.1.1:80", []string{"6.6.6.6, 7.7.7.7, 198.51.100.7"}, nil, "198.51.100.7"},
		{"trusted chain skipped, right-most untrusted wins", xff, "10.1.1.1:80", []string{"6.6.6.6, 198.51.100.7, 10.2.2.2, 192.0.2.200"}, nil, "198.51.100.7"},
		{"several header lines are one list", xff, "10.1.1.1:80", []string{"6.6.6.6", "198.51.100.7, 10.2.2.2"}, nil, "198.51.100.7"},
		{"entries with ports", xff, "10.1.1.1:80", []string{"198.51.100.7:4711"}, nil, "198.51.100.7"},
		{"every hop trusted: the left-most", xff, "10.1.1.1:80", []string{"10.3.3.3, 10.2.2.2"}, nil, "10.3.3.3"},
		{"trusted peer without a header: the peer", xff, "10.1.1.1:80", nil, nil, "10.1.1.1"},
		{"garbage from a trusted hop: that hop", xff, "10.1.1.1:80", []string{"1.2.3.4, not-an-ip, 10.2.2.2"}, nil, "10.2.2.2"},
		{"empty right-most entry: the peer", xff, "10.1.1.1:80", []string{"1.2.3.4,"}, nil, "10.1.1.1"},
		{"X-Forwarded-For config ignores Forwarded", xff, "10.1.1.1:80", nil, []string{"for=1.2.3.4"}, "10.1.1.1"},
		{"Forwarded config ignores X-Forwarded-For", fwd, "10.1.1.1:80", []string{"1.2.3.4"}, nil, "10.1.1.1"},
		{"Forwarded: plain", fwd, "10.1.1.1:80", nil, []string{"for=198.51.100.7;proto=https"}, "198.51.100.7"},
		{"Forwarded: right-most untrusted", fwd, "10.1.1.1:80", nil, []string{`for=6.6.6.6, for=198.51.100.7;by=10.1.1.1, For="10.2.2.2"`}, "198.51.100.7"},
		{"Forwarded: quoted IPv6 with port", fwd, "10.1.1.1:80", nil, []string{`for="[2001:db8:1:2::9]:4711"`}, "2001:db8:1:2::/64"},
		{"Forwarded: quoted comma does not split", fwd, "10.1.1.1:80", nil, []string{`for=198.51.100.7;ext="a,for=6.6.6.6"`}, "198.51.100.7"},
		{"Forwarded: unknown from a trusted hop", fwd, "10.1.1.1:80", nil, []string{"for=6.6.6.6, for=unknown"}, "10.1.1.1"},
		{"Forwarded: element without for", fwd, "10.1.1.1:80", nil, []string{"for=6.6.6.6, proto=http"}, "10.1.1.1"},
		{"IPv6 grouped by /64", IPConfig{}, "[2001:db8:1:2:aaaa::1]:443", nil, nil, "2001:db8:1:2::/64"},
		{"IPv6 /56", IPConfig{IPv6Prefix: 56}, "[2001:db8:1:2ff::1]:443", nil, nil, "2001:db8:1:200::/56"},
		{"IPv6 /128 keys each address", IPConfig{IPv6Prefix: 128}, "[2001:db8::1]:443", nil, nil, "2001:db8::1"},
		{"IPv6 zone dropped", IPConfig{IPv6Prefix: 128}, "[fe80::1%eth0]:443", nil, nil, "fe80::1"},
		{"IPv4-mapped IPv6 is IPv4", IPConfig{}, "[::ffff:198.51.100.7]:443", nil, nil, "198.51.100.7"},
		{"IPv4 /24", IPConfig{IPv4Prefix: 24}, "198.51.100.7:1", nil, nil, "198.51.100.0/24"},
		{"trusted IPv6 proxy", xff, "[2001:db8:ffff::1]:443", []string{"2001:db8:1:2::77"}, nil, "2001:db8:1:2::/64"},
		{"RemoteAddr without port", IPConfig{}, "198.51.100.7", nil, nil, "198.51.100.7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ip, err := NewClientIP(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range c.fwd {
				r.Header.Add("Forwarded", v)
			}
			k, err := ip.Key(r)
			if err != nil {
				t.Fatal(err)
			}
			if k.Class != "ip" || k.ID != c.want {
				t.Errorf("Key = %+v, want ip %q", k, c.want)
			}
		})
	}
}

func TestClientIPErrors(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "@" // a Unix socket peer
	if _, err := IP(r); !errors.Is(err, ErrNoClientIP) {
		t.Errorf("IP(unix peer) error = %v, want ErrNoClientIP", err)
	}
	for _, cfg := range []IPConfig{
		{IPv6Prefix: 129}, {IPv6Prefix: -1}, {IPv4Prefix: 33}, {Header: "X-Real-IP"},
		{TrustedProxies: []string{""}}, {TrustedProxies: []string{"10.0.0.0/8", "nonsense"}},
	} {
		if _, err := NewClientIP(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewClientIP(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// TestForgedHeadersThroughMiddleware checks at the HTTP level that clients
// who rotate X-Forwarded-For still share their own bucket.
func TestForgedHeadersThroughMiddleware(t *testing.T) {
	clk := newClock()
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Limits: []Limit{{Policy: defaultPolicy.Rate().Burst(3)}}}).Handler(ok)
	codes := map[int]int{}
	for i := range 10 {
		w := do(h, "198.51.100.7:4000", func(r *http.Request) {
			r.Header.Set("X-Forwarded-For", netip.AddrFrom4([4]byte{1, 2, 3, byte(i)}).String())
			r.Header.Set("Forwarded", "for=5.6.7."+string(rune('0'+i)))
		})
		codes[w.Code]++
	}
	if codes[200] != 3 || codes[429] != 7 {
		t.Errorf("codes = %v, want 3×200 and 7×429: forged headers must not mint buckets", codes)
	}
}

// TestIPv6RotationSharesABucket: one host cycling through its /64.
func TestIPv6RotationSharesABucket(t *testing.T) {
	clk := newClock()
	h := newMW(t, Config{Store: newStore(t, clk), Clock: clk, Limits: []Limit{{Policy: defaultPolicy.Rate().Burst(2)}}}).Handler(ok)
	for i, want := range []int{200, 200, 429, 429} {
		w := do(h, "[2001:db8:1:2::"+string(rune('a'+i))+"]:443")
		if w.Code != want {
			t.Errorf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if w := do(h, "[2001:db8:1:3::a]:443"); w.Code != 200 {
		t.Errorf("another /64: %d, want 200", w.Code)
	}
}

// FuzzClientIP: whatever the headers hold, Addr never panics, answers the
// peer when the peer is not trusted, and otherwise the peer or one of the
// hops of the header it reads.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{"198.51.100.7", "1.2.3.4, 10.0.0.9", `for="[2001:db8::1]:80";proto=https, for=unknown`,
		`for="\"x,y\""`, ",,,", "for=", `"`, "[::1", "[::ffff:10.0.0.1]:1"} {
		f.Add("10.0.0.1:80", s)
		f.Add("198.51.100.7:80", s)
	}
	proxies := []string{"10.0.0.0/8", "::1/128"}
	byXFF, _ := NewClientIP(IPConfig{TrustedProxies: proxies})
	byFwd, _ := NewClientIP(IPConfig{TrustedProxies: proxies, Header: "Forwarded"})
	f.Fuzz(func(t *testing.T, remote, header string) {
		for _, c := range []*ClientIP{byXFF, byFwd} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = remote
			r.Header.Set("X-Forwarded-For", header)
			r.Header.Set("Forwarded", header)
			a, err := c.Addr(r)
			peer, ok := parseHop(remote)
			if !ok {
				if !errors.Is(err, ErrNoClientIP) {
					t.Fatalf("RemoteAddr %q: %v, %v; want ErrNoClientIP", remote, a, err)
				}
				continue
			}
			if err != nil || a == peer {
				if err != nil {
					t.Fatalf("Addr: %v", err)
				}
				continue
			}
			if !c.trusted(peer) {
				t.Fatalf("untrusted peer %v, header %q: client %v", peer, header, a)
			}
			hops := strings.Split(header, ",")
			if c == byFwd {
				hops = forwardedFor([]string{header})
			}
			if !slices.ContainsFunc(hops, func(h string) bool { b, ok := parseHop(h); return ok && b == a }) {
				t.Fatalf("peer %v, header %q: client %v is not one of its hops", peer, header, a)
			}
		}
	})
}
