package redisstore

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
)

// Lease script ops, for LeaseCall.
const (
	OpAcquire = opAcquire
	OpRelease = opRelease
	OpRenew   = opRenew
)

// LeaseCall makes one lease call (OpAcquire, OpRelease or OpRenew) and
// returns the script's whole reply: now (Redis's TIME with the server
// clock), ok, remaining, retry-after µs and the kind of repair, so tests
// can replay each call through algo.
func LeaseCall(ctx context.Context, s *Store, op, key string, p algo.LeasePolicy, id string) ([]int64, error) {
	return s.lease(ctx, nil, op, key, p, id)
}
