package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// TestBatchOneScriptCall: takes of one bucket each that leave in one
// pipeline share one script call (a batch), each answered as if alone, in
// order: three on one hot key, two others under two policies, and a key
// holding garbage, repaired and reported for its own caller only. A quota's
// take is sent as its own call.
func TestBatchOneScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	rdb := heldClient(t, srv)
	var mu sync.Mutex
	var repaired []string
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Pipeline: redisstore.PipelineConfig{Writers: 1},
		OnRepair: func(key string, err error) {
			mu.Lock()
			defer mu.Unlock()
			repaired = append(repaired, key)
		}})
	p, p2 := algo.PerHour(1).Burst(10), algo.PerHour(2).Burst(5)
	quota := algo.Quota(100, algo.Day, 0)
	if err := admin.Set(ctxT(t), s.Key("j"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, pol := range []algo.Policy{p, p2} { // the policies are numbered: the batch's fast path
		if _, err := s.Take(ctxT(t), store.Request{Key: fmt.Sprint("other", i), Policy: pol, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	unpause := pause(t, rdb)
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	type take struct {
		key string
		pol algo.Policy
	}
	takes := []take{{"h", p}, {"a", p}, {"h", p}, {"b", p2}, {"j", p}, {"q", quota}, {"h", p}}
	outs := make([]chan outcome, len(takes))
	for i, tk := range takes {
		outs[i] = make(chan outcome, 1)
		go func() {
			res, err := s.Take(context.Background(), store.Request{Key: tk.key, Policy: tk.pol, Cost: 1})
			outs[i] <- outcome{res, err}
		}()
	}
	waitState(t, s, len(takes), 1)
	held(t, rdb, 1)
	ev0 := calls(t, admin, "evalsha")
	unpause()
	if o := <-first; o.err != nil || !o.res.Allowed {
		t.Fatalf("first = %+v, %v", o.res, o.err)
	}
	var hot []int64
	for i, tk := range takes {
		o := <-outs[i]
		if o.err != nil {
			t.Fatalf("take %d (%s) = %v", i, tk.key, o.err)
		}
		switch tk.key {
		case "h":
			if !o.res.Allowed {
				t.Errorf("take %d on h = %+v, want admitted", i, o.res)
			}
			hot = append(hot, o.res.Remaining)
		case "a", "b", "q":
			if want := tk.pol.Capacity() - 1; !o.res.Allowed || o.res.Remaining != want {
				t.Errorf("take %d on %s = %+v, want admitted with %d left", i, tk.key, o.res, want)
			}
		case "j": // repaired: an empty bucket stamped now
			if o.res.Allowed || o.res.Remaining != 0 || o.res.RetryAfter != algo.Micros(p.Unit()/p.Refill()) {
				t.Errorf("take on the repaired key = %+v, want denied with one token's wait", o.res)
			}
		}
	}
	slices.Sort(hot)
	if !slices.Equal(hot, []int64{7, 8, 9}) {
		t.Errorf("hot key remaining %v, want 7, 8, 9: each take charged once, in turn", hot)
	}
	if n := calls(t, admin, "evalsha") - ev0; n != 3 {
		t.Errorf("%d script calls, want 3: first, the six takes of buckets in one, the quota's", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(repaired, []string{s.Key("j")}) {
		t.Errorf("repairs reported %q, want only %q", repaired, s.Key("j"))
	}
}

// TestBatchDifferential: rounds of takes from as many goroutines, several
// on one key, through one writer that collects them into batches, give
// algo's Results at the time the script reports, each take after the
// earlier ones on its key; on one server and on a cluster, whose batches
// are per slot (two keys of each of two hash tags).
func TestBatchDifferential(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, b := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	} {
		t.Run(b.name, func(t *testing.T) { batchDifferential(t, b.rdb(t)) })
	}
}

func batchDifferential(t *testing.T, rdb redis.UniversalClient) {
	run := 0
	keys := []string{"{a}0", "{a}1", "{b}0", "{b}1"}
	rapid.Check(t, func(rt *rapid.T) {
		run++
		s := newStore(t, rdb, redisstore.Config{Prefix: fmt.Sprintf("%sbatch%d:", redistest.Prefix(t), run),
			Pipeline: redisstore.PipelineConfig{Writers: 1, MaxBatch: 8, MaxDelay: time.Millisecond}})
		pols := make([]algo.Policy, len(keys))
		shared := genEdgePolicy(rt, "shared ")
		for i := range pols {
			pols[i] = shared // a run of one policy: its number read once
			if rapid.Bool().Draw(rt, fmt.Sprintf("own policy %d", i)) {
				pols[i] = genEdgePolicy(rt, fmt.Sprintf("p%d ", i))
			}
		}
		states := make([]algo.State, len(keys))
		for round := range rapid.IntRange(1, 6).Draw(rt, "rounds") {
			// Each key taken 0-3 times this round, all at one cost.
			type call struct {
				key  int
				res  algo.Result
				now  int64
				err  error
				cost int64
			}
			var cs []*call
			for k := range keys {
				cost := genEdgeCost(rt, pols[k])
				for range rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("takes of %d", k)) {
					cs = append(cs, &call{key: k, cost: cost})
				}
			}
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Go(func() {
					c.res, c.now, c.err = redisstore.TakeNow(context.Background(), s, keys[c.key], pols[c.key], c.cost)
				})
			}
			wg.Wait()
			for _, c := range cs {
				if c.err != nil {
					rt.Fatalf("round %d: take of %s: %v", round, keys[c.key], c.err)
				}
			}
			// The script decided each group of one key and one time in
			// turn: replay them so, earlier times first.
			slices.SortStableFunc(cs, func(a, b *call) int {
				if a.now != b.now {
					return int(a.now - b.now)
				}
				return a.key - b.key
			})
			for i := 0; i < len(cs); {
				j := i
				for j < len(cs) && cs[j].now == cs[i].now && cs[j].key == cs[i].key {
					j++
				}
				k, now := cs[i].key, cs[i].now
				want := make([]algo.Result, 0, j-i)
				for range j - i {
					var r algo.Result
					var err error
					if states[k], r, err = (algo.TokenBucket{}).Take(pols[k], states[k], now, cs[i].cost); err != nil {
						rt.Fatal(err)
					}
					states[k] = forget(pols[k], states[k], now)
					want = append(want, r)
				}
				got := make([]algo.Result, 0, j-i)
				for _, c := range cs[i:j] {
					got = append(got, c.res)
				}
				// Takes of one cost: which caller got which answer is
				// the order they joined the batch in.
				byAnswer := func(a, b algo.Result) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }
				slices.SortFunc(want, byAnswer)
				slices.SortFunc(got, byAnswer)
				if !slices.Equal(got, want) {
					rt.Fatalf("round %d key %s at %d, %d takes of %d:\nalgo %+v\ngot  %+v", round, keys[k], now, j-i, cs[i].cost, want, got)
				}
				i = j
			}
		}
	})
}

// TestBatchRefusedWritesNothing: a call of several keys each alone (a
// batch of takes, a refund) that the script refuses for one key's
// arguments has written nothing, on its fast path and its general one.
func TestBatchRefusedWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := ctxT(t)
	pre := redistest.Prefix(t)
	k0, k1, k2, reg := pre+"k0", pre+"k1", pre+"k2", "pol:"+pre
	// A day's quota of 100 in UTC: refill -(kind 1 + 4*(offset 0 + 86399)).
	quota := fmt.Sprintf("100:0:%d", -(1 + 4*86399))
	// The bucket policy 10:1000:1 gets its number first, so that the fast
	// path takes the first key (absent) before it meets the second.
	if err := redisstore.Script().Run(ctx, rdb, []string{k0, reg}, "10:1000:1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		keys []string
		args []any
		k1   string // what k1 holds before and after: "" absent
	}{
		{"fast path, bad cost", []string{k1, k2, reg}, []any{"10:1000:1", 1, "10:1000:1", 11}, ""},
		{"fast path, bad unit", []string{k1, k2, reg}, []any{"10:1000:1", 1, "10:0:1", 1}, ""},
		{"fast path, a negative cost", []string{k1, k2, reg}, []any{"st", "10:1000:1", 1, "10:1000:1", -1}, ""},
		{"general path (a quota first), bad cost", []string{k1, k2, reg}, []any{quota, 1, "10:1000:1", 11}, ""},
		{"general path (a new policy first), bad cost", []string{k1, k2, reg}, []any{"7:1000:1", 1, "10:1000:1", 11}, ""},
		{"refund", []string{k1, k2, reg}, []any{"sr", "10:1000:1", 1, "10:1000:1", 11}, "500000000"},
		{"keeping corrupt keys", []string{k1, k2, reg}, []any{"stk", "10:1000:1", 1, "10:1000:1", 1}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := rdb.Del(ctx, k1, k2).Err(); err != nil {
				t.Fatal(err)
			}
			if c.k1 != "" {
				if err := rdb.Set(ctx, k1, c.k1, time.Hour).Err(); err != nil { // a bucket 5 tokens short, policy 0
					t.Fatal(err)
				}
			}
			before, err := rdb.HGetAll(ctx, reg).Result()
			if err != nil {
				t.Fatal(err)
			}
			err = redisstore.Script().Run(ctx, rdb, c.keys, c.args...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "RBARG") {
				t.Fatalf("script = %v, want RBARG", err)
			}
			if v, err := rdb.Get(ctx, k1).Result(); v != c.k1 || (err != nil) != (c.k1 == "") {
				t.Errorf("%s holds %q (%v) after the refused call, want %q", k1, v, err, c.k1)
			}
			if n, err := rdb.Exists(ctx, k2).Result(); err != nil || n != 0 {
				t.Errorf("%s exists after the refused call (%v)", k2, err)
			}
			if after, err := rdb.HGetAll(ctx, reg).Result(); err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("registry %v after the refused call (%v), want %v", after, err, before)
			}
		})
	}
}

// TestBatchOfOneKeyNamedTwice: a batch naming a key twice takes from it
// twice, the second take after the first, on the fast path (the policy
// numbered first) and on the general path (a new policy, numbered by the
// first take).
func TestBatchOfOneKeyNamedTwice(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := ctxT(t)
	pre := redistest.Prefix(t)
	reg := "pol:" + pre
	// A bucket of 3 refilled one token an hour.
	const pol, hour = "3:3600000000:1", 3600_000_000
	for _, numbered := range []bool{false, true} {
		k := fmt.Sprintf("%stwice%v", pre, numbered)
		if numbered {
			if err := redisstore.Script().Run(ctx, rdb, []string{pre + "other", reg}, pol, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		vals, err := redisstore.RunInts(ctx, rdb, []string{k, k, reg}, pol, 2, pol, 2)
		if err != nil {
			t.Fatal(err)
		}
		// {now, all admitted, then per take admitted, remaining, retry,
		// reset}: 2 of 3 taken, 1 left, full in 2 hours; then 2 more
		// denied, 1 left, one hour until the second token.
		if want := []int64{0, 1, 1, 0, 2 * hour, 0, 1, hour, 2 * hour}; len(vals) != 10 || !slices.Equal(vals[1:], want) {
			t.Fatalf("numbered %v: reply %v, want [now %v]", numbered, vals, want)
		}
	}
}

// TestBatchKeepCorruptSentAlone: with KeepCorrupt a take fails alone on a
// corrupt key (its error would fail a whole batch), so its pipeline
// neighbours are answered.
func TestBatchKeepCorruptSentAlone(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	rdb := heldClient(t, srv)
	s := newStore(t, rdb, redisstore.Config{Timeout: patience, Corrupt: redisstore.KeepCorrupt, Pipeline: redisstore.PipelineConfig{Writers: 1}})
	p := algo.PerHour(1).Burst(10)
	if err := admin.Set(ctxT(t), s.Key("bad"), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	unpause := pause(t, rdb)
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	bad := takeAsync(context.Background(), s, "bad", p)
	good := takeAsync(context.Background(), s, "good", p)
	waitState(t, s, 2, 1)
	unpause()
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	if o := <-bad; !errors.Is(o.err, store.ErrCorruptState) {
		t.Errorf("take of the corrupt key = %+v, %v; want store.ErrCorruptState", o.res, o.err)
	}
	if o := <-good; o.err != nil || o.res.Remaining != 9 {
		t.Errorf("take beside it = %+v, %v; want admitted, 9 left", o.res, o.err)
	}
}
