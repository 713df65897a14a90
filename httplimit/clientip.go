package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// IPConfig says how to find a request's client address. The zero value
// trusts nothing: the client is the TCP peer (http.Request.RemoteAddr), and
// forwarding headers, which any client can write, are ignored.
type IPConfig struct {
	// TrustedProxies are the networks of your own reverse proxies and
	// load balancers. Only when the TCP peer is inside one of them is the
	// forwarding header read, from the right: each trusted hop is
	// skipped, and the first (right-most) address that is not trusted is
	// the client. Addresses to its left were written by the client and
	// are ignored. Each is a network in CIDR notation ("10.0.0.0/8",
	// "2001:db8::/32") or a single address ("192.0.2.7"). Default: none.
	TrustedProxies []string
	// Header is the header your trusted proxies write: "X-Forwarded-For",
	// the de facto header (a comma-separated list of addresses, each
	// proxy appending the address of its peer), or "Forwarded", RFC
	// 7239's (elements such as for=192.0.2.60;proto=https or
	// for="[2001:db8::1]:4711"), in any case. Only that header is read: a
	// proxy that appends to X-Forwarded-For passes a forged Forwarded
	// header through untouched, so reading both would let a client
	// choose its address. Default: "X-Forwarded-For".
	Header string
	// IPv6Prefix groups IPv6 clients by network: one host usually owns
	// a whole /64 and can rotate through its addresses, so the default
	// is 64. express-rate-limit v8 uses 56. 128 keys each address.
	IPv6Prefix int
	// IPv4Prefix groups IPv4 clients; the default 32 keys each address.
	IPv4Prefix int
}

// ClientIP finds a request's client address per an [IPConfig], and keys
// requests by it. A ClientIP is immutable and safe for simultaneous use by
// multiple goroutines.
type ClientIP struct {
	cfg       IPConfig
	trust     []netip.Prefix
	forwarded bool // Header is RFC 7239's Forwarded
}

// NewClientIP returns a ClientIP for cfg, or an error wrapping
// [ErrInvalidConfig] for a prefix length out of range, a trusted proxy
// that is neither a network nor an address, or another Header.
func NewClientIP(cfg IPConfig) (*ClientIP, error) {
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = 64
	}
	if cfg.IPv4Prefix == 0 {
		cfg.IPv4Prefix = 32
	}
	switch {
	case cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128:
		return nil, fmt.Errorf("%w: IPv6Prefix %d outside [1, 128]", ErrInvalidConfig, cfg.IPv6Prefix)
	case cfg.IPv4Prefix < 1 || cfg.IPv4Prefix > 32:
		return nil, fmt.Errorf("%w: IPv4Prefix %d outside [1, 32]", ErrInvalidConfig, cfg.IPv4Prefix)
	}
	c := &ClientIP{cfg: cfg, trust: make([]netip.Prefix, 0, len(cfg.TrustedProxies))}
	switch http.CanonicalHeaderKey(cfg.Header) {
	case "", "X-Forwarded-For":
	case "Forwarded":
		c.forwarded = true
	default:
		return nil, fmt.Errorf("%w: Header %q is neither X-Forwarded-For nor Forwarded", ErrInvalidConfig, cfg.Header)
	}
	for _, v := range cfg.TrustedProxies {
		v = strings.TrimSpace(v)
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				return nil, fmt.Errorf("%w: trusted proxy %q is neither a CIDR nor an address", ErrInvalidConfig, v)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() { // ::ffff:10.0.0.0/104 is 10.0.0.0/8
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		c.trust = append(c.trust, p.Masked())
	}
	return c, nil
}

// defaultIP trusts nothing and groups IPv6 by /64.
var defaultIP, _ = NewClientIP(IPConfig{})

// IP is the KeyFunc of the default [ClientIP]: the TCP peer's address,
// IPv6 grouped by /64, forwarding headers ignored. Behind a reverse proxy
// every client would share the proxy's bucket: build a ClientIP with your
// proxies in IPConfig.TrustedProxies and use its Key instead.
func IP(r *http.Request) (Key, error) { return defaultIP.Key(r) }

// Key is a [KeyFunc]: the client's network (see [ClientIP.Prefix]) in class
// "ip", such as "192.0.2.7" or "2001:db8:1:2::/64".
func (c *ClientIP) Key(r *http.Request) (Key, error) {
	p, err := c.Prefix(r)
	if err != nil {
		return Key{}, err
	}
	if p.IsSingleIP() {
		return Key{Class: "ip", ID: p.Addr().String()}, nil
	}
	return Key{Class: "ip", ID: p.String()}, nil
}

// Prefix returns the client's address masked to IPv4Prefix or IPv6Prefix
// bits: the network the client is limited as.
func (c *ClientIP) Prefix(r *http.Request) (netip.Prefix, error) {
	a, err := c.Addr(r)
	if err != nil {
		return netip.Prefix{}, err
	}
	bits := c.cfg.IPv4Prefix
	if a.Is6() {
		bits = c.cfg.IPv6Prefix
	}
	return a.Prefix(bits) // cannot fail: bits were checked against the family
}

// Addr returns the client's address: the TCP peer, or, when the peer is a
// trusted proxy, the right-most untrusted address of the forwarding header.
// If every hop is trusted the left-most is the client; if a trusted hop
// wrote something that is not an address ("unknown", an obfuscated
// identifier, garbage), the client is taken to be that hop, so such
// requests share the proxy's bucket instead of choosing their own. IPv4
// addresses mapped into IPv6 are unmapped and zones dropped. The error
// wraps [ErrNoClientIP].
func (c *ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoClientIP, r.RemoteAddr)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	var hops []string
	if c.forwarded {
		hops = forwardedFor(r.Header.Values("Forwarded"))
	} else {
		for _, line := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(line, ",")...)
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break // the trusted hop at client could not name its peer
		}
		client = a
		if !c.trusted(a) {
			break
		}
	}
	return client, nil
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.trust {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop parses one address as RemoteAddr, X-Forwarded-For and Forwarded
// write them: "192.0.2.7", "192.0.2.7:443", "2001:db8::1",
// "[2001:db8::1]" or "[2001:db8::1]:443".
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	var a netip.Addr
	var err error
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 { // a port, most likely
		var ap netip.AddrPort
		if ap, err = netip.ParseAddrPort(s); err == nil {
			a = ap.Addr()
		} else {
			a, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
		}
	} else {
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// forwardedFor returns the for= value of each element of RFC 7239 Forwarded
// header lines, in order, unquoted; "" for an element without one, which
// parseHop rejects. Quoted strings may hold ',', ';' and '\' escapes.
func forwardedFor(lines []string) []string {
	var out []string
	for _, line := range lines {
		var key, val strings.Builder
		inKey, quoted, escaped, hasFor := true, false, false, false
		var forVal string
		endPair := func() {
			if strings.EqualFold(strings.TrimSpace(key.String()), "for") && !hasFor {
				forVal, hasFor = strings.TrimSpace(val.String()), true
			}
			key.Reset()
			val.Reset()
			inKey = true
		}
		for i := 0; i < len(line); i++ {
			ch := line[i]
			switch {
			case escaped:
				val.WriteByte(ch)
				escaped = false
			case quoted && ch == '\\':
				escaped = true
			case ch == '"':
				quoted = !quoted
			case quoted:
				val.WriteByte(ch)
			case ch == '=' && inKey:
				inKey = false
			case ch == ';':
				endPair()
			case ch == ',':
				endPair()
				out = append(out, forVal)
				forVal, hasFor = "", false
			case inKey:
				key.WriteByte(ch)
			default:
				val.WriteByte(ch)
			}
		}
		endPair()
		out = append(out, forVal)
	}
	return out
}
