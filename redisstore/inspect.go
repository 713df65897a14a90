package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// Bucket is the state of one bucket as [Store.Inspect] finds it.
type Bucket struct {
	// Key is the Redis key holding the bucket.
	Key string
	// Exists reports whether Redis holds the key. An absent key is a full
	// bucket.
	Exists bool
	// Now is the time the bucket was evaluated at: the Redis server's
	// clock, or the client Clock.
	Now time.Time
	// Tokens is how many whole tokens are available now, between 0 and
	// Limit.
	Tokens int64
	// Limit is the policy's capacity.
	Limit int64
	// FullIn is how long until the bucket is full again with no traffic.
	FullIn time.Duration
	// Deficit and Stamp are the stored state (see algo.State): the deficit
	// below full in level units (above Limit·Unit when a reservation has
	// put the bucket into debt) and the time of the last update; zero when
	// the key is absent.
	Deficit int64
	Stamp   time.Time
	// TTL is the key's remaining time to live in Redis: zero when absent,
	// negative when the key has no expiry.
	TTL time.Duration
}

// Inspect returns the bucket at key under policy p as it stands now,
// without charging it or writing anything. It runs the same script as Take
// with cost 0, so Tokens and FullIn agree with what a Take would see.
func (s *Store) Inspect(ctx context.Context, key string, p algo.Policy) (Bucket, error) {
	reqs := [1]store.Request{{Key: key, Policy: p}}
	var res [1]algo.Result
	var in inspected
	if err := s.run(ctx, opInspect, reqs[:], res[:], &in); err != nil {
		return Bucket{}, err
	}
	b := Bucket{
		Key:     s.Key(key),
		Exists:  in.pttl != -2,
		Now:     time.UnixMicro(in.now),
		Tokens:  res[0].Remaining,
		Limit:   p.Capacity(),
		FullIn:  res[0].ResetAfter,
		Deficit: in.deficit,
	}
	if b.Exists {
		b.Stamp = time.UnixMicro(in.stamp)
		b.TTL = time.Duration(in.pttl) * time.Millisecond
	}
	return b, nil
}

// Reset deletes the buckets at keys, which makes them full. It is also the
// way out of store.ErrCorruptState: whatever the key held is deleted. On a
// cluster each key is deleted on its own node.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("redisstore: reset key %d: %w", i, store.ErrEmptyKey)
		}
		full[i] = s.prefix + k
	}
	if len(full) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var err error
	if s.route == single {
		err = s.rdb.Del(ctx, full...).Err()
	} else {
		pipe := s.rdb.Pipeline()
		for _, k := range full {
			pipe.Del(ctx, k)
		}
		_, err = pipe.Exec(ctx)
	}
	if err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

// ResetPolicies deletes the policy registries (WIRE.md, "Policy changes")
// of the buckets at keys (without the prefix): on a single server the
// Store's one registry, on a cluster that of each key's slot, on a Ring
// that of each key's shard. Call it only when none of those slots holds a
// bucket any more (after Reset of them all, as a benchmark's cleanup
// does): a bucket whose policy's number its registry no longer holds is
// read as written under the next call's policy.
func (s *Store) ResetPolicies(ctx context.Context, keys ...string) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if r, ok := s.rdb.(*redis.Ring); ok { // one registry name, on each key's shard
		shards := map[*redis.Client]bool{}
		for _, k := range keys {
			c, err := r.GetShardClientForKey(s.prefix + k)
			if err != nil {
				return fmt.Errorf("redisstore: reset policies: %w", err)
			}
			shards[c] = true
		}
		for c := range shards {
			if err := c.Del(ctx, s.regs.one.s).Err(); err != nil {
				return fmt.Errorf("redisstore: reset policies: %w", err)
			}
		}
		return nil
	}
	regs := map[string]bool{}
	for _, k := range keys {
		reg, _ := s.regs.key(s.prefix + k)
		regs[reg] = true
	}
	pipe := s.rdb.Pipeline()
	for r := range regs {
		pipe.Del(ctx, r)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisstore: reset policies: %w", err)
	}
	return nil
}
