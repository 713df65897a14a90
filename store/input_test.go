package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// TestIsInputError: every sentinel of bad input, wrapped as a store wraps
// it, is an input error; a store's failures to decide are not.
func TestIsInputError(t *testing.T) {
	input := []error{
		store.ErrEmptyKey, store.ErrKeyTooLong, store.ErrCorruptState, store.ErrNotTogether,
		store.ErrDuplicateKey, store.ErrUnsupported, algo.ErrInvalidPolicy, algo.ErrInvalidQuota, algo.ErrInvalidCost,
		algo.ErrCostExceedsCapacity, algo.ErrInvalidTime, algo.ErrInvalidState, algo.ErrQuotaUnsupported,
		algo.ErrInvalidReservation, algo.ErrInvalidLeasePolicy, algo.ErrInvalidLeaseID,
	}
	for _, e := range input {
		if err := fmt.Errorf("redisstore: key %q: %w", "k", e); !store.IsInputError(err) {
			t.Errorf("IsInputError(%v) = false, want true", err)
		}
	}
	for _, err := range []error{nil, store.ErrClosed, context.Canceled, context.DeadlineExceeded, io.EOF,
		errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), fmt.Errorf("store failed: %w", io.ErrUnexpectedEOF)} {
		if store.IsInputError(err) {
			t.Errorf("IsInputError(%v) = true, want false", err)
		}
	}
}
