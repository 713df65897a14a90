package rls_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/rls"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// TestLawAcrossThreeServers: three servers, each with its own Redis
// client, share one redis-server; clients hammer one descriptor through
// all three at once. Over every interval [ti, tj] of the run the servers
// together admit at most burst + rate·(tj−ti), and, since every round
// asks for more than is left, exactly that up to rounding at the end. The
// buckets run on a shared manual clock (redisstore's client clock), so
// the bound is checked exactly, with no sleeping.
func TestLawAcrossThreeServers(t *testing.T) {
	const (
		rate  = 10 // per second
		burst = 20
	)
	cfg, err := rls.Parse("law.yaml", []byte("domain: law\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      burst: 20\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	clk := storetest.NewClock()
	prefix := redistest.Prefix(t)
	var rigs []*rig
	for range 3 {
		rs, err := redisstore.New(srv.Client(), redisstore.Config{Prefix: prefix, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		rigs = append(rigs, serve(t, cfg, rls.Options{Store: rs}, nil))
	}

	const rounds, perRound = 40, 12
	admitted := make([]int64, rounds)
	at := make([]time.Duration, rounds)
	req := &pb.RateLimitRequest{Domain: "law", Descriptors: []*rlpb.RateLimitDescriptor{desc("client=203.0.113.9")}}
	for i := range rounds {
		if i > 0 {
			clk.Add(time.Duration(17+31*(i%7)) * time.Millisecond) // uneven steps
		}
		at[i] = clk.Now().Sub(storetest.Start)
		var n atomic.Int64
		var wg sync.WaitGroup
		for j := range perRound {
			wg.Go(func() {
				resp, err := rigs[j%3].client.ShouldRateLimit(t.Context(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		admitted[i] = n.Load()
	}
	for i := range rounds {
		var sum int64
		for j := i; j < rounds; j++ {
			sum += admitted[j]
			bound := burst + int64(rate*(at[j]-at[i]).Seconds())
			if sum > bound {
				t.Fatalf("rounds %d..%d (%v..%v) admitted %d, above burst + rate·t = %d", i, j, at[i], at[j], sum, bound)
			}
		}
	}
	var total int64
	for _, n := range admitted {
		total += n
	}
	if want := burst + int64(rate*at[rounds-1].Seconds()); total != want {
		t.Fatalf("admitted %d in all, want exactly %d (every round asked for more than was left)", total, want)
	}
}

// TestClusterHashTags: on Redis Cluster a request's descriptors that
// share their first entry share a slot (TagFirst) and are taken
// atomically: a refusal charges none. With TagDescriptor they land in
// different slots and are taken in order: the first is charged before the
// second refuses.
func TestClusterHashTags(t *testing.T) {
	cfg, err := rls.Parse("edge.yaml", []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	cl := redistest.StartCluster(t)
	addr, path := desc("remote_address=198.51.100.4"), desc("remote_address=198.51.100.4", "path=/login")
	for _, c := range []struct {
		tag       rls.HashTag
		sameSlot  bool
		wantThird string
	}{
		{rls.TagFirst, true, "OVER_LIMIT [OK/8 OVER_LIMIT/0]"},
		{rls.TagDescriptor, false, "OVER_LIMIT [OK/7 OVER_LIMIT/0]"},
	} {
		clk := storetest.NewClock()
		rs := newRedisStore(t, cl.Client(), clk)
		r := serve(t, cfg, rls.Options{Store: rs, Cluster: true, HashTag: c.tag}, nil)
		svc, _ := rls.NewService(cfg, rls.Options{Store: rs, HashTag: c.tag})
		k1, _ := svc.Key("edge", addr)
		k2, _ := svc.Key("edge", path)
		if same := redisstore.Slot(k1) == redisstore.Slot(k2); same != c.sameSlot {
			t.Fatalf("tag %d: keys %s and %s in one slot: %v, want %v", c.tag, k1, k2, same, c.sameSlot)
		}
		a := &asker{t: t, r: r, domain: "edge"}
		a.wantD("OK [OK/9 OK/1]", addr, path)
		a.wantD("OK [OK/8 OK/0]", addr, path)
		a.wantD(c.wantThird, addr, path)
	}
}
