package store

import (
	"errors"
	"fmt"

	"github.com/ratebucket/ratebucket/algo"
)

// DefaultMaxKeyLen is the longest key, in bytes, that the stores accept
// unless configured otherwise (memstore.Config.MaxKeyLen,
// redisstore.Config.MaxKeyLen). It bounds the memory one bucket can hold:
// without it a client that chooses its own keys could store a megabyte per
// bucket, a terabyte in a million buckets. 256 bytes leaves room for a
// prefix, a tier and a class around a 64-byte identity (httplimit hashes
// longer ones), a UUID, an IPv6 address or an API key.
const DefaultMaxKeyLen = 256

// ErrKeyTooLong reports a key longer than the store's maximum key length
// ([DefaultMaxKeyLen] unless configured). Nothing is charged.
var ErrKeyTooLong = errors.New("store: key too long")

// MaxKeyLen returns the bound a store configured with n applies: n when
// positive, [DefaultMaxKeyLen] when n is 0, and no bound (the largest int)
// when n is negative.
func MaxKeyLen(n int) int {
	switch {
	case n == 0:
		return DefaultMaxKeyLen
	case n < 0:
		return int(^uint(0) >> 1)
	}
	return n
}

// CheckKey returns nil for a key a store accepts under the bound maxLen (as
// returned by [MaxKeyLen]): not empty ([ErrEmptyKey]) and at most maxLen
// bytes ([ErrKeyTooLong]).
func CheckKey(key string, maxLen int) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > maxLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), maxLen)
	}
	return nil
}

// CheckRequest validates one request as every store does before it
// decides, so that bad input charges nothing: the key ([CheckKey]), the
// policy (algo.ErrInvalidPolicy) and the cost (algo.ErrInvalidCost for a
// negative one, algo.ErrCostExceedsCapacity above capacity).
func CheckRequest(r Request, maxKeyLen int) error {
	if err := CheckKey(r.Key, maxKeyLen); err != nil {
		return err
	}
	if err := r.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case r.Cost < 0:
		return fmt.Errorf("%w: %d", algo.ErrInvalidCost, r.Cost)
	case r.Cost > r.Policy.Capacity():
		return fmt.Errorf("%w: cost %d, capacity %d", algo.ErrCostExceedsCapacity, r.Cost, r.Policy.Capacity())
	}
	return nil
}

// CheckRequests validates every request of a multi-limit take with
// [CheckRequest] and refuses a key named twice ([ErrDuplicateKey]). The
// error names the request (or the pair) by index.
func CheckRequests(reqs []Request, maxKeyLen int) error {
	var seen map[string]int
	if len(reqs) > 16 { // pairwise for the usual few, a map for many
		seen = make(map[string]int, len(reqs))
	}
	for i, r := range reqs {
		if err := CheckRequest(r, maxKeyLen); err != nil {
			return fmt.Errorf("request %d (%.64q): %w", i, r.Key, err)
		}
		j := -1
		if seen != nil {
			if k, ok := seen[r.Key]; ok {
				j = k
			}
			seen[r.Key] = i
		} else {
			for k := range i {
				if reqs[k].Key == r.Key {
					j = k
					break
				}
			}
		}
		if j >= 0 {
			return fmt.Errorf("requests %d and %d: key %.64q: %w", j, i, r.Key, ErrDuplicateKey)
		}
	}
	return nil
}
