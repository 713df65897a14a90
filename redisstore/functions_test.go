package redisstore_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestFunctionLibrary: the library is named after the wire version and
// the script's SHA1, and holds the script file's text unchanged.
func TestFunctionLibrary(t *testing.T) {
	name, code := redisstore.FunctionLibrary()
	if want := fmt.Sprintf("ratebucket_v%d_%s", redisstore.WireVersion, redisstore.Script().Hash()[:12]); name != want {
		t.Errorf("library %q, want %q", name, want)
	}
	src, err := os.ReadFile("tokenbucket.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(code, "#!lua name="+name+"\n") || !strings.Contains(code, "\n"+string(src)+"\nend}\n") {
		t.Errorf("the library does not wrap tokenbucket.lua unchanged:\n%.300s", code)
	}
}

// TestConformanceFunctions: through FCALL the store passes storetest, as
// through EVALSHA, pipelined and not.
func TestConformanceFunctions(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	rdb := redistest.Start(t).Client()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
				return newStore(t, rdb, redisstore.Config{Clock: clk, Pipeline: m.cfg, Functions: true})
			})
		})
	}
}

// functionFlush empties rdb's server of Functions, as a new node is.
func functionFlush(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.FunctionFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFunctionsLoad: as TestScriptFlush for EVALSHA. A server without the
// library (a fresh one, then after FUNCTION FLUSH) gets it loaded by the
// first call, which is sent again once: every take, inspect and multi-take
// is charged once, and FCALL alone serves the calls in between.
func TestFunctionsLoad(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("FUNCTION FLUSH would drop the libraries of others sharing the server (REDIS_URL)")
	}
	rdb := srv.Client()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			functionFlush(t, rdb)
			s := newStore(t, rdb, redisstore.Config{Pipeline: m.cfg, Functions: true})
			p := algo.PerHour(1).Burst(10)
			fc0, ev0 := calls(t, rdb, "fcall"), calls(t, rdb, "evalsha")+calls(t, rdb, "eval")
			for i := range 4 {
				if i == 2 {
					functionFlush(t, rdb)
				}
				res, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1})
				if err != nil || res.Remaining != int64(9-i) {
					t.Fatalf("take %d = %+v, %v; want %d remaining", i, res, err, 9-i)
				}
			}
			functionFlush(t, rdb)
			if b, err := s.Inspect(ctxT(t), "k", p); err != nil || b.Tokens != 6 {
				t.Fatalf("Inspect after a flush = %+v, %v; want 6 tokens", b, err)
			}
			functionFlush(t, rdb)
			mr, err := s.TakeMulti(ctxT(t), []store.Request{{Key: "{m}a", Policy: p, Cost: 2}, {Key: "{m}b", Policy: p, Cost: 3}})
			if err != nil || !mr.Allowed || mr.Results[0].Remaining != 8 || mr.Results[1].Remaining != 7 {
				t.Fatalf("TakeMulti after a flush = %+v, %v; want both charged once", mr, err)
			}
			// Loads: the fresh server, take 2, the inspect, the multi-take.
			if n := redisstore.FunctionLoads(s); n != 4 {
				t.Errorf("%d FUNCTION LOADs, want 4", n)
			}
			// FCALLs: 6 calls, 4 of them twice (missing, then run).
			if fc, ev := calls(t, rdb, "fcall")-fc0, calls(t, rdb, "evalsha")+calls(t, rdb, "eval")-ev0; fc != 10 || ev != 0 {
				t.Errorf("FCALL ran %d times, EVAL(SHA) %d; want 10 and 0", fc, ev)
			}
		})
	}
}

// TestFunctionsPipelineLoad: as TestPipelineNoScript. Nine takes in one
// pipeline that all find the library missing cost one FUNCTION LOAD, and
// each is sent again once: every bucket is charged exactly once per take.
func TestFunctionsPipelineLoad(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("FUNCTION FLUSH would drop the libraries of others sharing the server (REDIS_URL)")
	}
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	rdb := redis.NewClient(o) // its calls wait for the pause: no ReadTimeout, only their deadlines
	t.Cleanup(func() { rdb.Close() })
	admin, flusher := srv.Client(), srv.Client()
	if err := flusher.Ping(ctxT(t)).Err(); err != nil { // connected before the pause, which would hold its handshake
		t.Fatal(err)
	}
	s := newStore(t, rdb, redisstore.Config{Pipeline: redisstore.PipelineConfig{Writers: 1}, Functions: true})
	p := algo.PerHour(1).Burst(10)
	if _, err := s.Take(ctxT(t), store.Request{Key: "k", Policy: p, Cost: 1}); err != nil { // the library is loaded
		t.Fatal(err)
	}
	// CLIENT PAUSE WRITE holds FCALL and FUNCTION FLUSH, which run in the
	// order they came once it ends: first, the flush, then the batch, sent
	// when first's reply is in.
	if err := admin.Do(ctxT(t), "CLIENT", "PAUSE", 3_600_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ClientUnpause(context.Background()) })
	first := takeAsync(context.Background(), s, "first", p)
	waitState(t, s, 0, 1)
	var batch []<-chan outcome
	for range 9 {
		batch = append(batch, takeAsync(context.Background(), s, "k", p))
	}
	waitState(t, s, 9, 1)
	flushed := make(chan error, 1)
	go func() { flushed <- flusher.FunctionFlush(context.Background()).Err() }()
	for held := 0; held < 2; {
		list, err := admin.ClientList(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		held = len(regexp.MustCompile(`(?m) flags=\w*b\w* `).FindAllString(list, -1))
	}
	if err := admin.ClientUnpause(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{} // nine takes charged once each leave 8, 7, ..., 0
	for _, ch := range batch {
		o := <-ch
		if o.err != nil || o.res.Remaining > 8 || seen[o.res.Remaining] {
			t.Fatalf("a take of the batch = %+v, %v; want each of 0 to 8 remaining once", o.res, o.err)
		}
		seen[o.res.Remaining] = true
	}
	if n := redisstore.FunctionLoads(s); n != 2 {
		t.Fatalf("%d FUNCTION LOADs, want 2: the fresh server's, and one for the whole batch", n)
	}
}

// TestFunctionsCluster: on a Cluster, a master without the library (a new
// empty node, here flushed) gets it from the first call that finds it
// missing, and so do the other masters (FUNCTION LOAD reaches every
// master); pipelined and not, every take is charged once.
func TestFunctionsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	ctx := ctxT(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := newStore(t, rdb, redisstore.Config{Pipeline: m.cfg, Functions: true})
			p := algo.PerHour(1).Burst(10)
			byNode := map[string]string{} // a master's address: a key it holds
			for i := 0; len(byNode) < redistest.ClusterSize; i++ {
				k := fmt.Sprint("n", i)
				node, err := rdb.MasterForKey(ctx, s.Key(k))
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := byNode[node.Options().Addr]; ok {
					continue
				}
				if len(byNode) == 0 { // the first master loses its library
					if err := node.FunctionFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				byNode[node.Options().Addr] = k
			}
			keys := slices.Collect(maps.Values(byNode))
			loads := redisstore.FunctionLoads(s)
			done := make(chan error, len(keys))
			for _, k := range keys {
				go func() {
					res, err := s.Take(ctx, store.Request{Key: k, Policy: p, Cost: 1})
					if err == nil && res.Remaining != 9 {
						err = fmt.Errorf("take on %s = %+v, want 9 remaining (charged once)", k, res)
					}
					done <- err
				}()
			}
			for range keys {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if n := redisstore.FunctionLoads(s) - loads; n < 1 {
				t.Fatalf("%d FUNCTION LOADs, want at least 1", n)
			}
			name, _ := redisstore.FunctionLibrary()
			err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name}).Result()
				if err == nil && len(libs) != 1 {
					err = fmt.Errorf("master %s has %d libraries named %s, want 1", c.Options().Addr, len(libs), name)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
