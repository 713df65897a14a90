package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

var inspectCommand = &command{
	name:    "inspect",
	summary: "show buckets kept in Redis: tokens now, time until full, TTL",
	usage: `inspect --redis URL --capacity N --rate R
                         [--prefix rb:] KEY...

Shows each bucket as a Take would see it now, without charging it: the
tokens left, how long until it is full again, and the key's TTL in Redis
(an absent key is a full bucket). Nothing is written.

A bucket stores only a deficit and a time, so reading it needs the policy
it is used with: give the same --capacity and --rate as the application.
KEY is the key the application passes to the store, without the store's
--prefix; httplimit's keys look like h:default:user{42}.

A key holding something that is not a bucket is reported as corrupt; clear
it with 'ratebucket reset'.

--json prints one object per key: key, redis_key, exists, evaluated_at
(RFC 3339), tokens, capacity, full_in_ms, deficit_units, updated_at
(RFC 3339, absent for an absent key), ttl_ms (null without expiry) and,
for a corrupt key, error. Durations are whole milliseconds, rounded up.

'ratebucket demo' on Redis prints the inspect command for its bucket,
with the run's own --prefix.

Examples:
  ratebucket inspect --redis 127.0.0.1:6379 --capacity 100 --rate 2/s \
      'h:default:user{test-user}'
  ratebucket inspect --redis redis://10.0.0.5:6379/0 --capacity 200 \
      --rate 200/m --json api:user:42 api:user:43`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		rf := addRedisFlags(fs, "the Redis holding the buckets (required)")
		pf := addPolicyFlags(fs, 100, "2/s")
		prefix := fs.String("prefix", redisstore.DefaultPrefix, "the redisstore `prefix` the application uses")
		asJSON := fs.Bool("json", false, "print the buckets as JSON")
		return func(ctx context.Context, e *env, keys []string) error {
			set := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			if !set["capacity"] || !set["rate"] {
				return usagef("inspect needs the policy the keys are used with: --capacity N --rate R")
			}
			p, err := pf.policy()
			if err != nil {
				return err
			}
			rs, done, err := openRedisCommand(ctx, rf, *prefix, keys)
			if err != nil {
				return err
			}
			defer done()
			var rows []inspectRow
			var failed int
			for _, k := range keys {
				b, err := rs.Inspect(ctx, k, p)
				row := inspectRow{Key: k, Bucket: b}
				if err != nil {
					if ctx.Err() != nil || !errors.Is(err, store.ErrCorruptState) {
						return fmt.Errorf("inspect %s: %w", k, err)
					}
					row.Error, row.Bucket.Key = err.Error(), rs.Key(k)
					failed++
				}
				rows = append(rows, row)
			}
			if *asJSON {
				out := make([]inspectJSON, len(rows))
				for i, r := range rows {
					out[i] = r.json()
				}
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(out)
			} else {
				err = printInspect(e, rows)
			}
			if err == nil && failed > 0 {
				err = fmt.Errorf("%d of %d keys hold something that is not a bucket (%w); clear them with 'ratebucket reset'", failed, len(keys), store.ErrCorruptState)
			}
			return err
		}
	},
}

// inspectRow is one key's answer.
type inspectRow struct {
	Key string // as given, without the store's prefix
	redisstore.Bucket
	Error string // why the key is not a bucket, if it is not
}

// inspectJSON is one key's answer as --json prints it: one field per
// fact, snake_case, durations in whole milliseconds rounded up (the unit
// in the name), times in RFC 3339 (UTC, to the microsecond).
type inspectJSON struct {
	Key      string `json:"key"`       // the key as the application passes it to the store
	RedisKey string `json:"redis_key"` // the Redis key: the store's prefix and key
	Exists   bool   `json:"exists"`    // Redis holds the key; an absent key is a full bucket
	// EvaluatedAt is the time the bucket was read at: the Redis server's
	// clock.
	EvaluatedAt string `json:"evaluated_at,omitempty"`
	Tokens      int64  `json:"tokens"`     // whole tokens available now
	Capacity    int64  `json:"capacity"`   // the policy's capacity (--capacity)
	FullInMS    int64  `json:"full_in_ms"` // until the bucket is full again with no traffic; 0 when full
	// DeficitUnits and UpdatedAt are the stored state (algo.State): the
	// deficit below full in 1/unit tokens (the policy's Unit), and the
	// time of the last update; 0 and absent for an absent key.
	DeficitUnits int64  `json:"deficit_units"`
	UpdatedAt    string `json:"updated_at,omitempty"`
	// TTLMS is the key's remaining time to live in Redis: 0 when the key
	// is absent, null when it has no expiry.
	TTLMS *int64 `json:"ttl_ms"`
	// Error says why the key is not a bucket (store.ErrCorruptState).
	Error string `json:"error,omitempty"`
}

// json returns r as --json prints it.
func (r inspectRow) json() inspectJSON {
	j := inspectJSON{Key: r.Key, RedisKey: r.Bucket.Key, Exists: r.Exists, EvaluatedAt: rfc3339(r.Now),
		Tokens: r.Tokens, Capacity: r.Limit, FullInMS: ceilMillis(r.FullIn), DeficitUnits: r.Deficit,
		UpdatedAt: rfc3339(r.Stamp), Error: r.Error}
	if r.TTL >= 0 {
		ms := ceilMillis(r.TTL)
		j.TTLMS = &ms
	}
	return j
}

// ceilMillis rounds d up to whole milliseconds, 0 for d <= 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// rfc3339 formats t in UTC to the microsecond, "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.999999Z07:00")
}

// printInspect writes rows as a table.
func printInspect(e *env, rows []inspectRow) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKENS\tFULL IN\tTTL\tREDIS KEY")
	for _, r := range rows {
		switch {
		case r.Error != "":
			fmt.Fprintf(tw, "%s\tcorrupt\t-\t-\t%s\n", r.Key, r.Bucket.Key)
		case !r.Exists:
			fmt.Fprintf(tw, "%s\t%d/%d\tfull\tabsent\t%s\n", r.Key, r.Tokens, r.Limit, r.Bucket.Key)
		default:
			fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s\t%s\n", r.Key, r.Tokens, r.Limit, fmtWait(r.FullIn), fmtTTL(r.TTL), r.Bucket.Key)
		}
	}
	return tw.Flush()
}

// fmtWait formats a wait to the millisecond: "31.5s", "0s".
func fmtWait(d time.Duration) string {
	if d <= 0 {
		return "full"
	}
	return d.Round(time.Millisecond).String()
}

// fmtTTL formats a Redis TTL: "none" for a key without expiry.
func fmtTTL(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}

var resetCommand = &command{
	name:    "reset",
	summary: "delete buckets in Redis, which makes them full (and clears bad data)",
	usage: `reset --redis URL [--prefix rb:] KEY...

Deletes the buckets at the given keys, so their owners start again with a
full bucket. This is the documented way out of a key that holds something
that is not a bucket (store.ErrCorruptState): whatever it holds is deleted.
Only the keys named are touched; there are no patterns.

KEY is the key the application passes to the store, without the store's
--prefix (see 'ratebucket inspect --help').

Examples:
  ratebucket reset --redis 127.0.0.1:6379 'h:default:user{test-user}'
  ratebucket reset --redis redis://10.0.0.5:6379/0 --prefix app: user:42`,
	flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		rf := addRedisFlags(fs, "the Redis holding the buckets (required)")
		prefix := fs.String("prefix", redisstore.DefaultPrefix, "the redisstore `prefix` the application uses")
		return func(ctx context.Context, e *env, keys []string) error {
			rs, done, err := openRedisCommand(ctx, rf, *prefix, keys)
			if err != nil {
				return err
			}
			defer done()
			if err := rs.Reset(ctx, keys...); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			for _, k := range keys {
				fmt.Fprintf(e.stdout, "reset %s (%s)\n", k, rs.Key(k))
			}
			return nil
		}
	},
}

// openRedisCommand checks the flags and arguments inspect and reset share,
// and opens the store. done closes it.
func openRedisCommand(ctx context.Context, rf *redisFlags, prefix string, keys []string) (rs *redisstore.Store, done func(), err error) {
	if rf.url == "" {
		return nil, nil, usagef("--redis URL is required")
	}
	if len(keys) == 0 {
		return nil, nil, usagef("no KEY given")
	}
	for _, k := range keys {
		if k == "" {
			return nil, nil, usagef("empty KEY")
		}
	}
	be, err := openRedisBackend(ctx, rf, prefix)
	if err != nil {
		return nil, nil, err
	}
	return be.rs, func() { be.close() }, nil
}
