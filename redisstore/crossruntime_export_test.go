package redisstore

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// TakeMultiNow is TakeMulti's script call that also returns the time, in
// µs, the script decided at, so the cross-runtime test can replay it.
func TakeMultiNow(ctx context.Context, s *Store, reqs []store.Request) ([]algo.Result, int64, error) {
	res := make([]algo.Result, len(reqs))
	var in inspected
	err := s.run(ctx, opMulti, reqs, res, &in)
	return res, in.now, err
}
