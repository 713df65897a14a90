package redisstore_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/memstore"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// opsRounds is how many rapid.Check rounds TestOpsDifferential runs per
// backend: 8 of rapid's 100 cases (20 under -short), as many cases as
// storetest's eight properties of Take make.
const opsRounds = 8

// TestOpsDifferential is TestDifferential with every operation made as
// often as a take, in blocks of each once in a drawn order (takes, multi-takes, refunds single and multi, partial
// grants, reservations into debt, cancellations of any ticket given, and
// clock moves forwards and back over edge policies), on standalone Redis
// and on a Cluster (three keys of one hash tag), each answer required to
// be algo.TokenBucket's, memstore's and redisstore's alike. It logs how
// many calls of each operation it compared.
func TestOpsDifferential(t *testing.T) {
	t.Parallel() // a server of its own, CPU-bound: runs beside the others
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.rdb(t)
			calls := map[string]int{}
			cases, run := 0, 0
			for range opsRounds {
				rapid.Check(t, func(rt *rapid.T) {
					run++
					cases++
					clk := storetest.NewClock()
					rs := newStore(t, rdb, redisstore.Config{Clock: clk, Prefix: fmt.Sprintf("%sops%d:", redistest.Prefix(t), run), TTLMargin: time.Hour})
					ms, err := memstore.New(memstore.Config{Clock: clk})
					if err != nil {
						rt.Fatal(err)
					}
					defer ms.Close()
					d := &differential{rt: rt, ms: ms, rs: rs, keys: []string{"{u}:a", "{u}:b", "{u}:c"},
						pols: []algo.Policy{genEdgePolicy(rt, "a "), genEdgePolicy(rt, "b "), genEdgePolicy(rt, "c ")}, states: make([]algo.State, 3)}
					// Blocks of every operation once, in a drawn order:
					// each is compared as often as a take.
					ops := []string{"take", "multi", "refund", "refund multi", "at most", "reserve", "cancel"}
					step := 0
					for range rapid.IntRange(1, 6).Draw(rt, "blocks") {
						for _, op := range rapid.Permutation(ops).Draw(rt, "order") {
							i := rapid.IntRange(0, 2).Draw(rt, "key")
							now := clk.Add(genEdgeStep(rt, d.pols[i]))
							if now.UnixMicro() < 0 || now.UnixMicro() > algo.MaxTime {
								clk.Set(storetest.Start)
								now = storetest.Start
							}
							step++
							d.step, d.at = step, now.UnixMicro()
							calls[op]++
							d.do(op, i)
						}
					}
				})
			}
			names := make([]string, 0, len(calls))
			for op, n := range calls {
				names = append(names, fmt.Sprintf("%s %d", op, n))
			}
			sort.Strings(names)
			t.Logf("%d cases; calls compared (memstore and redisstore each, against algo): %s", cases, strings.Join(names, ", "))
		})
	}
}
