package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Key names the bucket a call is charged to: a class (what kind of
// identity) and an ID within it. Two calls under one rule share a bucket
// exactly when their class and ID are equal.
type Key struct {
	// Class is a short name for the kind of identity, such as "id" or
	// "ip": 1 to 32 bytes of [A-Za-z0-9_.-].
	Class string
	// ID is the identity within the class: any bytes, but not empty. An
	// ID longer than 64 bytes, or holding a byte that is not printable
	// ASCII or is a space, '#', '{' or '}', is replaced in the bucket key
	// by a SHA-256 digest.
	ID string
}

// KeyFunc returns the key of a call from its context, its full method name
// ("/package.Service/Method") and its incoming metadata (never nil). It
// returns an error wrapping [ErrNoKey] when the call carries no identity of
// the kind it looks for; the call then fails with InvalidArgument. An error
// holding a gRPC status (from status.Error) is returned to the client as it
// is, so a KeyFunc may choose the code.
type KeyFunc func(ctx context.Context, method string, md metadata.MD) (Key, error)

// Errors about keys. Match them with [errors.Is].
var (
	// ErrNoKey reports a call without the identity a KeyFunc needs, such
	// as an anonymous call to a method keyed by [Identity]. An empty
	// Key.ID is reported with it too: an empty key would put every such
	// caller in one bucket.
	ErrNoKey = errors.New("grpclimit: call has no key")
	// ErrNoPeer reports a call whose peer address is not an IP address
	// (a Unix socket, an in-memory bufconn listener). It is a deployment
	// problem, answered with Internal.
	ErrNoPeer = errors.New("grpclimit: no peer IP address")
)

type identityKey struct{}

// WithIdentity returns a copy of ctx carrying the authenticated identity
// of the caller (a user or service account ID). Call it in your
// authentication interceptor once the credentials are checked, and pass
// the new context on to the handler (for streams, wrap the ServerStream so
// that Context returns it): [Identity] and [IdentityOr] read it. Unlike
// metadata, the context cannot be written by a client.
func WithIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity set by [WithIdentity], if any.
func IdentityFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(identityKey{}).(string)
	return id, ok && id != ""
}

// Identity is the KeyFunc of the identity set by [WithIdentity], in class
// "id". For an anonymous call it returns an error wrapping [ErrNoKey].
func Identity(ctx context.Context, _ string, _ metadata.MD) (Key, error) {
	id, ok := IdentityFrom(ctx)
	if !ok {
		return Key{}, fmt.Errorf("%w: no identity in the context (see WithIdentity)", ErrNoKey)
	}
	return Key{Class: "id", ID: id}, nil
}

// Peer is the KeyFunc of the transport peer's IP address, in class "ip":
// an IPv4 address as it is, an IPv6 address grouped by its /64, such as
// "2001:db8:1:2::/64". Behind a proxy every client shares the proxy's
// bucket: key by identity there, or write a KeyFunc that trusts the
// proxy's metadata only from the proxy's address.
func Peer(ctx context.Context, _ string, _ metadata.MD) (Key, error) {
	p, err := PeerPrefix(ctx, 64)
	if err != nil {
		return Key{}, err
	}
	if p.IsSingleIP() {
		return Key{Class: "ip", ID: p.Addr().String()}, nil
	}
	return Key{Class: "ip", ID: p.String()}, nil
}

// PeerPrefix returns the network of the call's peer address: the address
// itself for IPv4, its first ipv6Bits bits for IPv6 (an IPv4 address mapped
// into IPv6 is unmapped; a zone is dropped). The error wraps [ErrNoPeer].
func PeerPrefix(ctx context.Context, ipv6Bits int) (netip.Prefix, error) {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return netip.Prefix{}, fmt.Errorf("%w: no peer in the context", ErrNoPeer)
	}
	var a netip.Addr
	switch addr := pr.Addr.(type) {
	case *net.TCPAddr:
		a = addr.AddrPort().Addr()
	default:
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: %s address %q", ErrNoPeer, addr.Network(), addr.String())
		}
		a = ap.Addr()
	}
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return netip.Prefix{}, fmt.Errorf("%w: invalid address", ErrNoPeer)
	}
	bits := 32
	if a.Is6() {
		bits = ipv6Bits
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: %v", ErrNoPeer, err)
	}
	return p, nil
}

// IdentityOr returns a KeyFunc that keys by the identity set by
// [WithIdentity] when there is one and by fallback otherwise (usually
// [Peer]).
func IdentityOr(fallback KeyFunc) KeyFunc {
	return func(ctx context.Context, method string, md metadata.MD) (Key, error) {
		if id, ok := IdentityFrom(ctx); ok {
			return Key{Class: "id", ID: id}, nil
		}
		return fallback(ctx, method, md)
	}
}

// maxIDLen is the longest Key.ID kept verbatim in a bucket key.
const maxIDLen = 64

// bucketID returns id as it appears in a bucket key: verbatim when short
// and plain, else "#" and the first 128 bits of its SHA-256 in hex. Plain
// IDs hold no '#', so a verbatim ID never equals a digest; nor '{' or '}',
// so the ID can be the key's Redis Cluster hash tag.
func bucketID(id string) string {
	plain := len(id) <= maxIDLen
	for i := 0; plain && i < len(id); i++ {
		c := id[i]
		plain = c > ' ' && c <= '~' && c != '#' && c != '{' && c != '}'
	}
	if plain {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + hex.EncodeToString(sum[:16])
}

// validName reports whether s may be a rule name or key class: 1 to 32
// bytes of [A-Za-z0-9_.-], safe in bucket keys and structured fields.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
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
