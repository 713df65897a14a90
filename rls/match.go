package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// lookup finds the limit of a descriptor the way envoyproxy/ratelimit
// does: entry by entry down the tree, at each level trying the key and
// value, then the wildcard values in file order, then the key alone. The
// limit applies only if it sits at the descriptor's last entry: a
// descriptor longer or shorter than the configured path matches nothing.
// shared[i] holds the wildcard pattern of entry i when that entry matched
// a share_threshold wildcard (then every such value shares one bucket);
// it is nil when no entry did.
func (root *node) lookup(entries []*rlpb.RateLimitDescriptor_Entry) (l *Limit, shared []string) {
	n := root
	for i, e := range entries {
		next := n.byValue[entry{e.Key, e.Value}]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
					next = w.n
					if next.share {
						if shared == nil {
							shared = make([]string, len(entries))
						}
						shared[i] = w.prefix + "*"
					}
					break
				}
			}
		}
		if next == nil {
			next = n.byKey[e.Key]
		}
		if next == nil {
			return nil, nil
		}
		if i == len(entries)-1 {
			return next.limit, shared
		}
		n = next
	}
	return nil, nil
}

// HashTag chooses which part of a bucket key is its Redis Cluster hash
// tag, and so which descriptors share a slot.
type HashTag uint8

const (
	// TagFirst, the default, tags the domain and the descriptor's first
	// entry: descriptors of one request that start with the same entry
	// (the client's address, say, then the address and the path) share a
	// slot and are taken atomically, and keys still spread over the
	// cluster by that first value.
	TagFirst HashTag = iota
	// TagDescriptor tags the whole descriptor: keys spread evenly, and
	// a request's descriptors are atomic only when they happen to share a
	// slot.
	TagDescriptor
	// TagDomain tags the domain alone: every request of a domain is
	// atomic, but the whole domain lives on one node.
	TagDomain
)

// ParseHashTag parses "first", "descriptor" or "domain".
func ParseHashTag(s string) (HashTag, bool) {
	switch s {
	case "first", "":
		return TagFirst, true
	case "descriptor":
		return TagDescriptor, true
	case "domain":
		return TagDomain, true
	}
	return 0, false
}

// maxTagLen and maxRestLen bound the two parts of a bucket key; longer
// parts are replaced by a digest, so no key exceeds
// store.DefaultMaxKeyLen whatever the descriptor values.
const (
	maxTagLen  = 96
	maxRestLen = 96
)

// bucketKey returns the bucket of a descriptor in domain:
//
//	<prefix>{<domain>|<k1>=<v1>}|<k2>=<v2>     (TagFirst)
//
// Keys, values and the domain are escaped (%XX for '%', '|', '=', '{',
// '}', and bytes outside printable ASCII), so no two descriptors share a
// key and a value cannot forge the hash tag. A share_threshold entry
// contributes its pattern ("files/*") instead of its value. suffix (for a
// limit override) is appended inside the key's last part.
func bucketKey(prefix, domain string, entries []*rlpb.RateLimitDescriptor_Entry, shared []string, tag HashTag, suffix string) string {
	var tagPart, rest strings.Builder
	escape(&tagPart, domain)
	cut := len(entries) // entries [0, cut) go into the tag
	switch tag {
	case TagFirst:
		cut = min(1, len(entries))
	case TagDomain:
		cut = 0
	}
	for i, e := range entries {
		b := &rest
		if i < cut {
			b = &tagPart
		}
		b.WriteByte('|')
		escape(b, e.Key)
		b.WriteByte('=')
		if shared != nil && shared[i] != "" {
			escape(b, shared[i])
		} else {
			escape(b, e.Value)
		}
	}
	rest.WriteString(suffix)
	t, r := tagPart.String(), rest.String()
	if len(t) > maxTagLen {
		t = digest(t)
	}
	if len(r) > maxRestLen {
		r = "|" + digest(r)
	}
	return prefix + "{" + t + "}" + r
}

// escape writes s to b with %XX for the bytes that structure a key.
func escape(b *strings.Builder, s string) {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '%' || c == '|' || c == '=' || c == '{' || c == '}' || c == '#' {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// digest is "#" and 128 bits of s's SHA-256 in hex; escaped text holds no
// '#', so a digest never equals a plain part.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(sum[:16])
}
