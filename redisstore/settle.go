package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Hold is not yet in the script: it answers store.ErrUnsupported.
func (s *Store) Hold(ctx context.Context, req store.Request, ttl time.Duration) (algo.Hold, algo.Result, error) {
	return algo.Hold{}, algo.Result{}, fmt.Errorf("redisstore: hold: %w", store.ErrUnsupported)
}

// Settle is not yet in the script: it answers store.ErrUnsupported.
func (s *Store) Settle(ctx context.Context, key string, p algo.Policy, h algo.Hold, actual int64) (algo.Settlement, error) {
	return algo.Settlement{}, fmt.Errorf("redisstore: settle: %w", store.ErrUnsupported)
}
