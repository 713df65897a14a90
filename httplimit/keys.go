package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Key names the bucket a request is charged to: a class (what kind of
// identity) and an ID within it. Two requests share a bucket exactly when
// their limit, class and ID are equal.
type Key struct {
	// Class is a short, low-cardinality name for the kind of identity,
	// such as "ip", "user" or "apikey". It is part of the bucket key, and
	// it is what the Config's Observer sees (never the ID), so it is safe as a
	// metrics label. It must be 1 to 32 bytes of [A-Za-z0-9_.-].
	Class string
	// ID is the identity within the class: any bytes, but not empty. An
	// ID longer than 64 bytes, or holding a byte that is not
	// printable ASCII or is a space, '#', '%', '{' or '}', is replaced in the
	// bucket key by a SHA-256 digest, so hostile or binary input cannot
	// bloat or break the store's key space.
	ID string
}

// KeyFunc returns the key of a request. It returns an error wrapping
// [ErrNoKey] when the request carries no identity of the kind it looks for;
// the middleware then answers with the Config's Error handler (400 by
// default), never by charging a shared bucket.
type KeyFunc func(r *http.Request) (Key, error)

// maxIDLen is the longest [Key.ID], in bytes, kept verbatim in a bucket
// key; longer IDs are hashed.
const maxIDLen = 64

// Errors. Match them with [errors.Is].
var (
	// ErrInvalidConfig reports a Config, IPConfig, Limit or option
	// outside its documented bounds. New, With, NewClientIP and
	// ResolveByTier return it, wrapped with the reason.
	ErrInvalidConfig = errors.New("httplimit: invalid configuration")
	// ErrNoKey reports a request without the identity a KeyFunc needs,
	// such as an anonymous request to a route keyed by [User], or a
	// missing API key header. An empty Key.ID is reported with it too: an
	// empty key would put every such caller in one bucket.
	ErrNoKey = errors.New("httplimit: request has no key")
	// ErrNoClientIP reports a request whose client address cannot be
	// read (a RemoteAddr that is not an IP, as on a Unix socket). It is
	// a deployment problem, answered with 500 by default.
	ErrNoClientIP = errors.New("httplimit: no client IP")
)

type ctxKey int

const userKey ctxKey = 0

// WithUser returns a copy of ctx carrying the authenticated user id. Call
// it in your authentication middleware, after the credentials are checked,
// and pass the request on with r.WithContext: [User] reads it.
// Unlike a client-supplied header, the context cannot be forged by a
// client.
func WithUser(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, userKey, id)
}

// userFrom returns the user id set by [WithUser], if any.
func userFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(userKey).(string)
	return id, ok && id != ""
}

// User returns a KeyFunc that keys by the authenticated user set by
// [WithUser], in class "user", and an anonymous request by fallback:
// User(IP) (or a [ClientIP]'s Key) is the article's "user if known, else
// IP", without trusting a client-supplied user header. With a nil
// fallback an anonymous request gets [ErrNoKey] (400).
func User(fallback KeyFunc) KeyFunc {
	return func(r *http.Request) (Key, error) {
		if id, ok := userFrom(r.Context()); ok {
			return Key{Class: "user", ID: id}, nil
		}
		if fallback == nil {
			return Key{}, fmt.Errorf("%w: no user in the request context (see WithUser)", ErrNoKey)
		}
		return fallback(r)
	}
}

// APIKey returns a KeyFunc that keys by the value of the named request
// header, in class "apikey". The value is always hashed with SHA-256 before
// it reaches the store, so secrets never appear in Redis keys or dumps.
// A missing or empty header returns [ErrNoKey].
//
// APIKey does not check that the key is valid: a client can invent keys, so
// put it behind the middleware that authenticates them, or key
// unauthenticated traffic by IP as well (several limits per request).
func APIKey(header string) KeyFunc {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (Key, error) {
		v := strings.TrimSpace(r.Header.Get(header))
		if v == "" {
			return Key{}, fmt.Errorf("%w: no %s header", ErrNoKey, header)
		}
		return Key{Class: "apikey", ID: digest(v)}, nil
	}
}

// bucketID returns id as it appears in a bucket key: verbatim when short
// and plain, else "#" and the first 128 bits of its SHA-256 in hex. Plain
// IDs never contain '#', so a verbatim ID never equals a digest; nor '{'
// or '}', so the ID can be the key's Redis Cluster hash tag.
func bucketID(id string) string {
	if len(id) > maxIDLen {
		return digest(id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '#' || c == '%' || c == '{' || c == '}' {
			return digest(id)
		}
	}
	return id
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:16])
}

// maxNameLen is the longest limit, tier, plan or key class name, in bytes.
const maxNameLen = 32

// validName reports whether s may be a limit, tier or key class name:
// 1 to maxNameLen bytes of [A-Za-z0-9_.-]. Such names are safe in bucket
// keys and in structured header fields without escaping.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
