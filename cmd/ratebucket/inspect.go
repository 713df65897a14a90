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
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(rows)
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
	Key string `json:"key"`
	redisstore.Bucket
	Error string `json:"error,omitempty"`
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
