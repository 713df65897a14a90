package redisstore_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// crossOps is how many calls each cross-runtime run makes, Go's and
// Node's together.
const crossOps = 1200

// TestCrossRuntime: a Go store and the Node package (js/, in a node
// process) interleave takes, multi-takes and inspects at random on the
// same keys of one Redis, and every answer, whichever runtime got it,
// equals what algo.TokenBucket computes for the same sequence at the
// server times the script reports. On a standalone server and on a
// Cluster (the Node side on ioredis's Cluster client).
func TestCrossRuntime(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		crossRuntime(t, srv.Client(), false, []string{srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		crossRuntime(t, cl.Client(), true, cl.Addrs)
	})
}

// nodeWorker is the node process running js/testutil/crossworker.js.
type nodeWorker struct {
	in  *json.Encoder
	out *bufio.Scanner
}

// nodeReply is one answer of the worker.
type nodeReply struct {
	SHA     string `json:"sha"`
	Error   string `json:"error"`
	Now     int64  `json:"now"`
	Results []struct {
		Allowed                    bool
		Limit, Remaining           int64
		RetryAfterUs, ResetAfterUs int64
	} `json:"results"`
}

// startNode starts the worker on the servers at addrs, or fails the test
// saying what to install.
func startNode(t *testing.T, cluster bool, addrs []string, prefix string) *nodeWorker {
	t.Helper()
	if _, err := os.Stat(filepath.Join("..", "js", "node_modules", "ioredis")); err != nil {
		t.Fatalf("js/node_modules has no ioredis: run `cd js && npm ci` (.ci/run does): %v", err)
	}
	cfg, _ := json.Marshal(map[string]any{"cluster": cluster, "addrs": addrs, "prefix": prefix})
	w := startWorker(t, "crossworker.js", string(cfg))
	if hello := w.read(t); hello.SHA != redisstore.Script().Hash() {
		t.Fatalf("node loaded a script with SHA1 %q, Go embeds %q: not the same file", hello.SHA, redisstore.Script().Hash())
	}
	return w
}

// startWorker starts node on js/testutil/<script> with args, talking
// JSON lines over its stdin and stdout; it ends when the test does.
func startWorker(t *testing.T, script string, args ...string) *nodeWorker {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found in PATH: the cross-runtime test needs Node.js 20 (apt-get install nodejs npm) and js/'s packages (cd js && npm ci)")
	}
	cmd := exec.Command(node, append([]string{filepath.Join("..", "js", "testutil", script)}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the worker ends at the end of its input
		if err := cmd.Wait(); err != nil {
			t.Errorf("node worker: %v", err)
		}
	})
	return &nodeWorker{in: json.NewEncoder(stdin), out: bufio.NewScanner(stdout)}
}

func (w *nodeWorker) read(t *testing.T) nodeReply {
	t.Helper()
	if !w.out.Scan() {
		t.Fatalf("node worker ended: %v", w.out.Err())
	}
	var r nodeReply
	if err := json.Unmarshal(w.out.Bytes(), &r); err != nil {
		t.Fatalf("node worker said %q: %v", w.out.Text(), err)
	}
	if r.Error != "" {
		t.Fatalf("node worker: %s", r.Error)
	}
	return r
}

// call has the worker run op ("t", "m" or "i") on reqs and returns the
// server time and one Result per request.
func (w *nodeWorker) call(t *testing.T, op string, reqs []store.Request) (int64, []algo.Result) {
	t.Helper()
	type wireReq struct {
		Key      string `json:"key"`
		Capacity int64  `json:"capacity"`
		Unit     int64  `json:"unit"`
		Refill   int64  `json:"refill"`
		Cost     int64  `json:"cost"`
	}
	msg := struct {
		Op   string    `json:"op"`
		Reqs []wireReq `json:"reqs"`
	}{Op: op}
	for _, r := range reqs {
		p := r.Policy
		msg.Reqs = append(msg.Reqs, wireReq{r.Key, p.Capacity(), p.Unit(), p.Refill(), r.Cost})
	}
	if err := w.in.Encode(msg); err != nil {
		t.Fatal(err)
	}
	r := w.read(t)
	res := make([]algo.Result, len(r.Results))
	for i, x := range r.Results {
		res[i] = algo.Result{Allowed: x.Allowed, Remaining: x.Remaining,
			RetryAfter: algo.Micros(x.RetryAfterUs), ResetAfter: algo.Micros(x.ResetAfterUs)}
	}
	return r.Now, res
}

// crossRuntime runs crossOps random calls, each by Go or by Node, on six
// hash tags of two buckets each, and replays them through algo.
func crossRuntime(t *testing.T, rdb redis.UniversalClient, cluster bool, addrs []string) {
	prefix := redistest.Prefix(t)
	s := newStore(t, rdb, redisstore.Config{Prefix: prefix})
	node := startNode(t, cluster, addrs, prefix)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 17))
	t.Logf("seed %d", seed)

	// Policies in odd terms (unit and refill both above 1 for most), most
	// refilling a fraction of a token between two calls on a key (a call
	// takes 0.1 to 1 ms, one in twelve is on a given key): buckets both
	// deny and refill.
	policies := map[string]algo.Policy{}
	var tags [][2]string
	for i := range 6 {
		pair := [2]string{fmt.Sprintf("{u%d}:burst", i), fmt.Sprintf("{u%d}:daily", i)}
		for _, k := range pair {
			period := time.Duration(rng.Int64N(2000)+1) * time.Millisecond
			policies[k] = algo.Per(rng.Int64N(50)+1, period).Burst(rng.Int64N(12) + 1)
		}
		tags = append(tags, pair)
	}
	cost := func(p algo.Policy) int64 {
		if rng.IntN(4) > 0 {
			return 1
		}
		return rng.Int64N(p.Capacity() + 1)
	}
	states := map[string]algo.State{} // absent: the zero State, a full bucket
	var byNode, admitted, denied int
	for i := range crossOps {
		pair := tags[rng.IntN(len(tags))]
		op, reqs := "t", []store.Request{{Key: pair[rng.IntN(2)]}}
		switch r := rng.IntN(10); {
		case r < 2:
			op, reqs = "m", []store.Request{{Key: pair[0]}, {Key: pair[1]}}
		case r < 3:
			op = "i"
		}
		for j := range reqs {
			reqs[j].Policy = policies[reqs[j].Key]
			if op != "i" {
				reqs[j].Cost = cost(reqs[j].Policy)
			}
		}
		var now int64
		var got []algo.Result
		who := "go"
		if rng.IntN(2) == 0 {
			who = "node"
			byNode++
			now, got = node.call(t, op, reqs)
		} else {
			now, got = goCall(t, s, op, reqs)
		}
		// Replay: each bucket alone, as algo decides it; a multi-take
		// keeps the new states only if every bucket admitted.
		next := map[string]algo.State{}
		all := true
		for j, r := range reqs {
			st, want, err := algo.TokenBucket{}.Take(r.Policy, states[r.Key], now, r.Cost)
			if err != nil {
				t.Fatal(err)
			}
			if got[j] != want {
				t.Fatalf("call %d (%s, op %s) on %s, cost %d at %d µs = %+v; algo from %+v says %+v",
					i, who, op, r.Key, r.Cost, now, got[j], states[r.Key], want)
			}
			next[r.Key] = st
			all = all && want.Allowed
		}
		if op == "m" && !all {
			denied++
			continue
		}
		for k, st := range next {
			states[k] = st
		}
		if op != "i" && all {
			admitted++
		} else if op != "i" {
			denied++
		}
	}
	t.Logf("%d calls agree with algo: %d by Node, %d by Go; %d admitted, %d denied, the rest inspects",
		crossOps, byNode, crossOps-byNode, admitted, denied)
}

// goCall runs op on reqs through the Go store.
func goCall(t *testing.T, s *redisstore.Store, op string, reqs []store.Request) (int64, []algo.Result) {
	t.Helper()
	ctx := ctxT(t)
	switch op {
	case "t":
		res, now, err := redisstore.TakeNow(ctx, s, reqs[0].Key, reqs[0].Policy, reqs[0].Cost)
		if err != nil {
			t.Fatal(err)
		}
		return now, []algo.Result{res}
	case "m":
		res, now, err := redisstore.TakeMultiNow(ctx, s, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return now, res
	}
	b, err := s.Inspect(ctx, reqs[0].Key, reqs[0].Policy)
	if err != nil {
		t.Fatal(err)
	}
	return b.Now.UnixMicro(), []algo.Result{{Allowed: true, Remaining: b.Tokens, ResetAfter: b.FullIn}}
}

// TestCrossRuntimePolicy pins the Node package's one piece of arithmetic
// of its own, the reduction of a capacity and a rate to the wire's three
// integers (js/src/policy.js), to algo's: over generated capacities and
// rates that Node's numbers hold exactly (below 2^53; Node refuses
// others), bounds and their neighbours included, Node builds a policy
// exactly when algo.NewPolicy does, with the same capacity, unit, refill
// and fill time. (Everything else Node computes is the script's.)
func TestCrossRuntimePolicy(t *testing.T) {
	w := startWorker(t, "policyworker.js")
	in, out := w.in, w.out
	const maxPeriodUs = int64(algo.MaxPeriod / time.Microsecond)
	const safe = 1<<53 - 1 // Node's numbers are exact below 2^53
	near := func(v int64) *rapid.Generator[int64] {
		return rapid.Custom(func(t *rapid.T) int64 { return v + rapid.Int64Range(-2, 2).Draw(t, "delta") })
	}
	var valid, invalid int
	rapid.Check(t, func(rt *rapid.T) {
		periodUs := rapid.OneOf(rapid.Int64Range(-1, 2_000_000), rapid.Int64Range(1, maxPeriodUs+2), near(maxPeriodUs),
			rapid.SampledFrom([]int64{1e6, 60e6, 3600e6, 86400e6, 7 * 86400e6})).Draw(rt, "period µs")
		tokens := rapid.OneOf(rapid.Int64Range(-1, 1000), rapid.Int64Range(1, 1e9), rapid.Int64Range(1, safe),
			near(min(max(periodUs, 1)*(algo.MaxPerSecond/1e6), safe-2))).Draw(rt, "tokens")
		// A capacity near the largest the reduced unit allows, when the
		// rate is valid; else anywhere, bounds included.
		capacities := []*rapid.Generator[int64]{rapid.Int64Range(-1, 1000), rapid.Int64Range(1, 1e9), rapid.Int64Range(1, safe),
			near(algo.MaxCapacity)}
		if p, err := algo.NewPolicy(1, algo.Per(tokens, time.Duration(periodUs)*time.Microsecond)); err == nil {
			capacities = append(capacities, near(algo.MaxLevel/p.Unit()))
		}
		capacity := rapid.OneOf(capacities...).Draw(rt, "capacity")

		want, werr := algo.NewPolicy(capacity, algo.Per(tokens, time.Duration(periodUs)*time.Microsecond))
		if err := in.Encode(map[string]int64{"capacity": capacity, "tokens": tokens, "periodUs": periodUs}); err != nil {
			rt.Fatal(err)
		}
		if !out.Scan() {
			rt.Fatalf("node worker ended: %v", out.Err())
		}
		var got struct {
			Capacity, Unit, Refill, FillTimeUs int64
			Error                              string
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			rt.Fatalf("node worker said %q: %v", out.Text(), err)
		}
		switch {
		case werr != nil && got.Error == "":
			rt.Fatalf("burst %d, %d/%dµs: algo refuses (%v), Node builds %+v", capacity, tokens, periodUs, werr, got)
		case werr == nil && got.Error != "":
			rt.Fatalf("burst %d, %d/%dµs: algo builds %v, Node refuses: %s", capacity, tokens, periodUs, want, got.Error)
		case werr != nil:
			invalid++
		case got.Capacity != want.Capacity() || got.Unit != want.Unit() || got.Refill != want.Refill() ||
			got.FillTimeUs != want.FillTime().Microseconds():
			rt.Fatalf("burst %d, %d/%dµs: Node %+v, algo capacity %d unit %d refill %d fill %dµs",
				capacity, tokens, periodUs, got, want.Capacity(), want.Unit(), want.Refill(), want.FillTime().Microseconds())
		default:
			valid++
		}
	})
	t.Logf("Node and algo agree on %d valid and %d invalid policies", valid, invalid)
}
