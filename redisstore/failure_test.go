package redisstore_test

import (
	"context"
	_ "embed"
	"errors"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/store"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
)

//go:embed tokenbucket.lua
var scriptSrc string

// calls returns how many times Redis has run cmd ("evalsha", "eval").
func calls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(ctxT(t), "commandstats").Result()
	if err != nil { // an empty answer would read as zero calls
		t.Fatalf("INFO commandstats: %v", err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// warm opens n pooled connections and leaves them idle. It holds each
// until all are open: n Pings at once from n goroutines may run one after
// another on a busy machine and share one connection. A retry that finds
// no idle connection must dial, and on a stalled server the handshake
// times out before the command is written (see TestNoReplayAfterTimeout).
func warm(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close() // back to the pool, idle
	}
	if idle := rdb.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections after warm, want %d", idle, n)
	}
}

// drained waits until the server of admin has no connection named name:
// it has read each to its end, so it has run every command written on
// it. The client named name must be closed first.
func drained(t *testing.T, admin *redis.Client, name string) {
	t.Helper()
	named := regexp.MustCompile(` name=` + regexp.QuoteMeta(name) + ` `)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	var list string
	if !poll(func() bool {
		var err error
		if list, err = admin.ClientList(ctx).Result(); err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		return !named.MatchString(list)
	}) {
		t.Fatalf("the server still has connections named %s:\n%s", name, list)
	}
}

// TestNoReplayAfterTimeout pins the double-charge bug of limiters that let
// go-redis replay a timed-out script (rate-limit-redis#144): the server
// stalls, the call times out on the client after the script was sent, and
// when Redis resumes it runs every copy it received. The script must have
// run exactly once. The control shows the same client replaying a plain
// EvalSha, 4 runs in all: go-redis v9.23.0 retries a command whose read
// timed out (processWithRetry, redis.go:1593, MaxRetries 3; shouldRetry,
// error.go:116, as _process set retryTimeout, redis.go:1848), each time on
// another pooled connection, the timed-out one being removed (isBadConn,
// error.go:188). A retry that finds no idle connection dials; its
// handshake times out before the command is written, and that error ends
// the retries (retryTimeout unset): hence warm, and a stall that lasts
// until the call has returned, not a DEBUG SLEEP that slow retries can
// outlast.
func TestNoReplayAfterTimeout(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("stalling a server shared with others (REDIS_URL) would stall them too")
	}
	p := algo.PerHour(1).Burst(100)
	tests := []struct {
		name string
		take func(ctx context.Context, rdb *redis.Client, s *redisstore.Store) error
		runs int64
	}{
		{"redisstore", func(ctx context.Context, _ *redis.Client, s *redisstore.Store) error {
			_, err := s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
			return err
		}, 1},
		{"control: plain EvalSha replays", func(ctx context.Context, rdb *redis.Client, s *redisstore.Store) error {
			sha := redis.NewScript(scriptSrc).Hash()
			return rdb.EvalSha(ctx, sha, []string{s.Key("k"), "pol:" + s.Key("")}, policyField(p), 1).Err()
		}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := srv.Options()
			opts.ReadTimeout = 100 * time.Millisecond // MaxRetries stays at its default, 3
			opts.ClientName = "replay"
			rdb := redis.NewClient(opts)
			defer rdb.Close()
			s := newStore(t, rdb, redisstore.Config{Timeout: 10 * time.Second})
			admin := srv.Client()
			inspector := newStore(t, admin, redisstore.Config{Prefix: s.Key("")})
			if _, err := s.Inspect(ctxT(t), "k", p); err != nil { // loads the script
				t.Fatal(err)
			}
			warm(t, rdb, 8)
			resume := stall(t, admin)
			err := tc.take(ctxT(t), rdb, s)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("call on a stalled server: %v, want a timeout", err)
			}
			rdb.Close() // every copy it sent is written; the server reads each connection to its end
			resume()
			drained(t, admin, opts.ClientName)
			b, err := inspector.Inspect(ctxT(t), "k", p)
			if err != nil {
				t.Fatal(err)
			}
			if runs := p.Capacity() - b.Tokens; runs != tc.runs {
				t.Fatalf("the script charged the bucket %d times, want %d", runs, tc.runs)
			}
		})
	}
}

// TestTimeouts: a slow Redis gives an error matching
// context.DeadlineExceeded at the context's deadline, or at Config.Timeout
// when the context has none; it never hangs.
func TestTimeouts(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	p := algo.PerSecond(1).Burst(5)
	tests := []struct {
		name    string
		timeout time.Duration // Config.Timeout
		ctx     func() (context.Context, context.CancelFunc)
	}{
		{"context deadline", time.Hour, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 150*time.Millisecond)
		}},
		{"store timeout", 150 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.Background(), func() {}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, rdb, redisstore.Config{Timeout: tc.timeout})
			if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
				t.Fatal(err)
			}
			if err := admin.Do(ctxT(t), "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			defer admin.Do(context.Background(), "CLIENT", "UNPAUSE")
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			res, err := s.Take(ctx, store.Request{Key: "k", Policy: p, Cost: 1})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Take on a paused server = %+v, %v; want an error matching context.DeadlineExceeded", res, err)
			}
			if d := time.Since(start); d > 5*time.Second { // the pause lasts 20s
				t.Fatalf("Take returned after %v: it waited for the server", d)
			}
		})
	}
}

// TestUnreachable: a Redis that is not there is an error wrapping the
// network error, at once.
func TestUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	srv.Kill(t)
	_, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: algo.PerSecond(1).Burst(5), Cost: 1})
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("Take on a dead server: %v, want an error wrapping *net.OpError", err)
	}
}

// TestScriptFlush: after SCRIPT FLUSH the next call loads the script with
// EVAL and succeeds; later calls use EVALSHA again.
func TestScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("SCRIPT FLUSH would drop the scripts of others sharing the server (REDIS_URL)")
	}
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{})
	p := algo.PerHour(1).Burst(10)
	ev0, sha0 := calls(t, rdb, "eval"), calls(t, rdb, "evalsha")
	for i := range 4 {
		if i == 2 {
			if err := rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		res, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1})
		if err != nil || res.Remaining != int64(9-i) {
			t.Fatalf("take %d = %+v, %v; want %d remaining", i, res, err, 9-i)
		}
	}
	// take 0 and take 2 found no script; takes 1 and 3 used the cached one.
	if ev, sha := calls(t, rdb, "eval")-ev0, calls(t, rdb, "evalsha")-sha0; ev != 2 || sha != 4 {
		t.Fatalf("EVAL ran %d times, EVALSHA %d; want 2 and 4 (2 of them NOSCRIPT)", ev, sha)
	}
}

// TestRestartDuringTraffic: while Redis is down calls fail with an error
// (within the timeout, not hanging), and after it comes back (empty,
// without the script) they succeed again.
func TestRestartDuringTraffic(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a local server to kill and restart, not REDIS_URL")
	}
	rdb := srv.Client()
	s := newStore(t, rdb, redisstore.Config{Timeout: time.Second})
	p := algo.PerSecond(1000).Burst(1000)
	var ok, failed atomic.Int64
	var phase atomic.Int32 // 0 before, 1 down (after Kill returns), 2 from Revive on
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				started := phase.Load()
				_, err := s.Take(context.Background(), store.Request{Key: "k" + strconv.Itoa(g*7+i%7), Policy: p, Cost: 1})
				switch {
				case err == nil && started == 1 && phase.Load() == 1:
					t.Errorf("Take succeeded while Redis was down")
				case err == nil:
					ok.Add(1)
				default:
					failed.Add(1)
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		tick := time.NewTicker(time.Millisecond) // polls a condition; times nothing
		defer tick.Stop()
		for !cond() {
			select {
			case <-deadline:
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s (ok %d, failed %d)", what, ok.Load(), failed.Load())
			case <-tick.C:
			}
		}
	}
	waitFor("traffic", func() bool { return ok.Load() > 50 })
	srv.Kill(t)
	phase.Store(1)
	f0 := failed.Load()
	waitFor("errors while down", func() bool { return failed.Load() > f0+20 })
	phase.Store(2) // from here calls may reach the new server
	srv.Revive(t)
	ok0 := ok.Load()
	waitFor("success after restart", func() bool { return ok.Load() > ok0+50 })
	close(stop)
	wg.Wait()
	// A fresh client: rdb's pool may still hold connections to the killed
	// server, and its retries can all land on them.
	if ev := calls(t, srv.Client(), "eval"); ev < 1 {
		t.Errorf("EVAL ran %d times after the restart; the script must have been reloaded", ev)
	}
}

// TestFailover: a replica promoted to master serves the same buckets. The
// script writes absolute expiry times (PXAT), which replicate as they are,
// so the stamps rebuilt from them on the new master are exact; the new
// master has no script cached and loads it on NOSCRIPT.
func TestFailover(t *testing.T) {
	primary, replica := redistest.Start(t), redistest.Start(t)
	if primary.External() {
		t.Skip("needs two local servers, not REDIS_URL")
	}
	prdb, rrdb := primary.Client(), replica.Client()
	if err := prdb.ConfigSet(ctxT(t), "repl-diskless-sync-delay", "0").Err(); err != nil { // sync at once
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := rrdb.ReplicaOf(ctxT(t), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	before := newStore(t, prdb, redisstore.Config{Prefix: prefix})
	p := algo.PerHour(3600).Burst(100)
	want := map[string]redisstore.Bucket{}
	for i, key := range []string{"a", "b", "c"} {
		if _, err := before.Take(ctxT(t), store.Request{Key: key, Policy: p, Cost: int64(10 * (i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the replica has every write (WAIT blocks at most 5s).
	if n, err := prdb.Wait(ctxT(t), 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	for _, key := range []string{"a", "b", "c"} {
		b, err := before.Inspect(ctxT(t), key, p)
		if err != nil {
			t.Fatal(err)
		}
		want[key] = b
	}
	if err := rrdb.ReplicaOf(ctxT(t), "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	after := newStore(t, rrdb, redisstore.Config{Prefix: prefix})
	for key, w := range want {
		b, err := after.Inspect(ctxT(t), key, p)
		if err != nil {
			t.Fatal(err)
		}
		if b.Deficit != w.Deficit || !b.Stamp.Equal(w.Stamp) {
			t.Errorf("key %s after failover: deficit %d stamp %v, before %d %v", key, b.Deficit, b.Stamp, w.Deficit, w.Stamp)
		}
	}
	if ev := calls(t, rrdb, "eval"); ev < 1 {
		t.Errorf("EVAL ran %d times on the new master; the script must have been loaded on NOSCRIPT", ev)
	}
}
