package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

//go:embed lease.lua
var leaseSrc string

// leaseScript is the lease script; as for script, only its source and
// SHA1 are used: it runs through noRetry, and through the pipeline.
var leaseScript = redis.NewScript(leaseSrc)

// LeaseScript returns the embedded lease script (lease.lua), the Lua twin
// of algo's lease functions, for tools that load it ahead of time or
// measure it. One acquire of a lease "job-1" among at most 10 living 30 s,
// on the server clock:
//
//	EVALSHA <LeaseScript().Hash()> 1 lease:rb:k sa 10 30000000 job-1
//
// Its keys, arguments and replies are part of the wire contract (WIRE.md,
// "Leases"), like the bucket script's.
func LeaseScript() *redis.Script { return leaseScript }

// DefaultLeasePrefix is put before [Config.Prefix] to make the default
// lease prefix: lease sets live at "lease:rb:" + key.
const DefaultLeasePrefix = "lease:"

// Lease script ops (the second letter of ARGV[1]).
const (
	opAcquire = "a"
	opRelease = "r"
	opRenew   = "n"
)

// Arguments of the lease script boxed once, as for the bucket script.
var (
	argLeaseSHA  any = leaseScript.Hash()
	argLeaseCall     = map[string][]byte{} // the call's letters: see written
)

func init() {
	for _, k := range []string{"sa", "sr", "sn", "ca", "cr", "cn", "sak", "srk", "snk", "cak", "crk", "cnk"} {
		argLeaseCall[k] = []byte(k)
	}
}

// evalSource returns the source of the script whose SHA1 is sha, to send
// as EVAL when Redis answered NOSCRIPT.
func evalSource(sha any) string {
	if sha == argLeaseSHA {
		return leaseSrc
	}
	return scriptSrc
}

// AcquireLease asks for a lease with the given id on key under p, in one
// atomic script call on the Redis server's clock (or Config.Clock's): see
// store.Store for what it answers, and the package documentation
// ("Requests in flight") for what Redis holds. Bad input is refused before
// Redis is called: store.ErrEmptyKey, store.ErrKeyTooLong (beyond
// Config.MaxKeyLen), algo.ErrInvalidLeasePolicy, algo.ErrInvalidLeaseID.
// A key holding something else than a lease set is repaired or refused as
// Config.Corrupt says (see [RepairCorrupt]); Redis failures are returned
// wrapped. On an error nothing was admitted, except that a call that timed
// out may have run: its lease then expires after p.TTL, as a crashed
// holder's does.
func (s *Store) AcquireLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (algo.LeaseResult, error) {
	var buf [5]int64 // the reply, on the stack
	r, err := s.lease(ctx, buf[:0], opAcquire, key, p, id)
	if err != nil {
		return algo.LeaseResult{}, err
	}
	return algo.LeaseResult{Allowed: r[1] == 1, Limit: p.Limit, Remaining: r[2], RetryAfter: algo.Micros(r[3])}, nil
}

// ReleaseLease frees id's lease on key and reports whether it was live, in
// one script call; releasing a lease that is not live reports false with a
// nil error. A key left with no lease is deleted. Errors are those of
// AcquireLease but the policy's.
func (s *Store) ReleaseLease(ctx context.Context, key, id string) (bool, error) {
	var buf [5]int64 // the reply, on the stack
	r, err := s.lease(ctx, buf[:0], opRelease, key, algo.LeasePolicy{}, id)
	return err == nil && r[1] == 1, err
}

// RenewLease extends id's live lease on key to expire p.TTL from now and
// reports whether it was live, in one script call; an expired lease is not
// renewed. Errors are those of AcquireLease.
func (s *Store) RenewLease(ctx context.Context, key string, p algo.LeasePolicy, id string) (bool, error) {
	var buf [5]int64 // the reply, on the stack
	r, err := s.lease(ctx, buf[:0], opRenew, key, p, id)
	return err == nil && r[1] == 1, err
}

// LeaseKey returns the Redis key that holds the leases of key. To drop a
// key's leases (every holder loses its slot), delete it.
func (s *Store) LeaseKey(key string) string { return s.leasePrefix + key }

// lease checks a lease call, makes it and returns the script's reply:
// now, ok, remaining, retry-after, repaired (see lease.lua), appended to
// dst.
func (s *Store) lease(ctx context.Context, dst []int64, op, key string, p algo.LeasePolicy, id string) ([]int64, error) {
	if op != opRelease {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
	}
	if err := store.CheckLease(key, id, s.maxKey); err != nil {
		return nil, fmt.Errorf("redisstore: lease key %.64q: %w", key, err)
	}
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ttl := p.TTL.Microseconds()
	clock, now := "s", int64(0)
	if s.clk != nil {
		clock, now = "c", s.clk.Now().UnixMicro()
		if now < 0 || now > algo.MaxTime-ttl {
			return nil, fmt.Errorf("redisstore: client clock %d µs, outside [0, %d]: %w", now, algo.MaxTime-ttl, algo.ErrInvalidTime)
		}
	}
	lkey := s.leasePrefix + key
	c := newCall(ctx)
	s.leaseArgs(c, op, clock, now, lkey, p, id)
	vals, err := s.send(c, true, dst)
	if err != nil {
		return nil, err
	}
	if len(vals) != 5 || vals[1] < 0 || vals[1] > 1 || vals[2] < 0 || vals[3] < 0 {
		return nil, fmt.Errorf("redisstore: lease script replied %v, want 5 integers: now, ok, remaining, retry-after, repaired", vals)
	}
	if vals[4] != 0 {
		s.onRepair(lkey, leaseRepairError(lkey, vals[4]))
	}
	return vals, nil
}

// leaseArgs builds the EVALSHA of the lease script: sha, one key, the
// call, for a client clock now and the margin, then the op's arguments
// (see lease.lua), in c.args, pointing to c's keys and numbers as
// fillArgs does. Under Config.Functions too: the Function library holds
// the bucket script only.
func (s *Store) leaseArgs(c *call, op, clock string, now int64, lkey string, p algo.LeasePolicy, id string) {
	c.keys = append(c.keys[:0], lkey, id)
	c.nums = append(c.nums[:0], now, p.Limit, p.TTL.Microseconds())
	args := append(c.args[:0], "evalsha", argLeaseSHA, 1, &c.keys[0], &c.mark)
	c.mark.word = argLeaseCall[clock+op+s.keep]
	if clock != "s" {
		args = append(args, &c.nums[0], s.marginArg)
	}
	switch op {
	case opAcquire:
		args = append(args, &c.nums[1], &c.nums[2])
	case opRenew:
		args = append(args, &c.nums[2])
	}
	c.args = append(args, &c.keys[1])
}

// leaseRepairError describes a repair of a lease set the script reported:
// kind is what the key held (see lease.lua's reply).
func leaseRepairError(key string, kind int64) error {
	held := fmt.Sprintf("was corrupt (kind %d)", kind)
	switch kind {
	case 1:
		held = "held another Redis type"
	case 3:
		held = "held a sorted set with a score above 2^53-1"
	}
	return fmt.Errorf("redisstore: key %.300q %s; rewritten as an empty lease set: %w", key, held, store.ErrCorruptState)
}

// leasePrefix returns the lease prefix cfg asks for, given the bucket
// prefix: cfg.LeasePrefix, or DefaultLeasePrefix + prefix. Neither prefix
// may start the other, so that no bucket key is ever a lease key.
func leasePrefix(cfg Config, prefix string) (string, error) {
	lp := cfg.LeasePrefix
	if lp == "" {
		lp = DefaultLeasePrefix + prefix
	}
	switch {
	case strings.ContainsAny(lp, "{}"):
		return "", fmt.Errorf("%w: LeasePrefix %q", ErrHashTagPrefix, lp)
	case strings.HasPrefix(lp, prefix) || strings.HasPrefix(prefix, lp):
		return "", fmt.Errorf("%w: LeasePrefix %q and Prefix %q: one starts the other, so a bucket key could name a lease set; choose a LeasePrefix that is not an extension of Prefix, nor a beginning of it", ErrInvalidConfig, lp, prefix)
	}
	return lp, nil
}
