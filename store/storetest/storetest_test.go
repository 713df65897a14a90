package storetest_test

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
	"github.com/ratebucket/ratebucket/store/storetest"
)

// mapStore is the simplest correct store: one mutex, one map. A mutant
// names a deliberate bug to plant in it.
type mapStore struct {
	mu     sync.Mutex
	m      map[string]algo.State
	clk    store.Clock
	mutant string
	closed bool
	leases map[string]algo.Leases // lease_test.go
	holds  map[string]algo.Hold   // ops_test.go
}

func (s *mapStore) Take(ctx context.Context, req store.Request) (algo.Result, error) {
	key, p, cost := req.Key, req.Policy, req.Cost
	res, err := s.TakeMulti(ctx, []store.Request{{Key: key, Policy: p, Cost: cost}})
	if err != nil {
		return algo.Result{}, err
	}
	return res.Results[0], nil
}

func (s *mapStore) TakeMulti(ctx context.Context, reqs []store.Request) (store.MultiResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed && s.mutant != "works after Close":
		return store.MultiResult{}, store.ErrClosed
	case ctx.Err() != nil && s.mutant != "ignores context":
		return store.MultiResult{}, ctx.Err()
	}
	now := s.clk.Now().UnixMicro()
	out := store.MultiResult{Allowed: true, Denied: -1}
	next := make([]algo.State, len(reqs))
	for i, r := range reqs {
		if err := store.CheckKey(r.Key, store.DefaultMaxKeyLen); err != nil && (r.Key != "" || s.mutant != "accepts empty key") {
			return store.MultiResult{}, err
		}
		for j := range i {
			if reqs[j].Key == r.Key {
				return store.MultiResult{}, store.ErrDuplicateKey
			}
		}
		old, at := s.m[r.Key], now
		switch s.mutant {
		case "forgets a bucket 1s early":
			if (algo.TokenBucket{}).IdleAt(r.Policy, old) <= now+1e6 {
				old = algo.State{}
			}
		case "refills twice as fast":
			if old.Stamp > 0 && now > old.Stamp {
				at = min(now+(now-old.Stamp), algo.MaxTime)
			}
		}
		st, res, err := algo.TokenBucket{}.Take(r.Policy, old, at, r.Cost)
		if err != nil {
			return store.MultiResult{}, err
		}
		switch s.mutant {
		case "stores caller's clock": // the bug DESIGN.md measured in a published script
			st.Stamp = now
		case "retry-after in ms":
			res.RetryAfter = res.RetryAfter.Round(time.Millisecond)
		}
		next[i] = st
		out.Results = append(out.Results, res)
		if !res.Allowed {
			out.Allowed = false
			if out.Denied < 0 || res.RetryAfter > out.RetryAfter {
				out.Denied, out.RetryAfter = i, res.RetryAfter
			}
		}
	}
	for i, r := range reqs { // a denied bucket keeps its new stamp, uncharged
		if out.Allowed || !out.Results[i].Allowed || s.mutant == "multi not atomic" {
			s.m[r.Key] = next[i]
		}
	}
	return out, nil
}

func (s *mapStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// mutants maps each planted bug to the check that must catch it.
var mutants = map[string]string{
	"accepts empty key":         "BadInput",
	"ignores context":           "Context",
	"stores caller's clock":     "Backwards",
	"retry-after in ms":         "RetryAfter",
	"multi not atomic":          "Multi",
	"works after Close":         "Close",
	"forgets a bucket 1s early": "Reference",
	"refills twice as fast":     "Law",
}

const childEnv = "STORETEST_MUTANTS"

// TestMutants runs the suite on the plain store and on every mutant, when
// TestSuiteCatchesBugs asks for it in a child process.
func TestMutants(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("run by TestSuiteCatchesBugs")
	}
	for _, mutant := range append([]string{"none"}, slices.Sorted(maps.Keys(mutants))...) {
		t.Run(mutant, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clk *storetest.Clock) store.Store {
				return &mapStore{m: map[string]algo.State{}, holds: map[string]algo.Hold{}, clk: clk, mutant: mutant}
			})
		})
	}
}

// TestSuiteCatchesBugs: the plain map store passes, and each planted bug
// fails the check meant for it. The suite runs in child processes, since a
// failing suite fails the test that runs it: one for the plain store's
// whole suite, and one per mutant running only the check meant for it (the
// other checks' verdicts on a mutant say nothing here), GOMAXPROCS at once.
func TestSuiteCatchesBugs(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("child process")
	}
	// child runs the suite's checks matching check ("" for all) on mutant.
	child := func(mutant, check string) string {
		run := "^TestMutants$/^" + regexp.QuoteMeta(strings.ReplaceAll(mutant, " ", "_")) + "$"
		if check != "" {
			run += "/^" + check + "$"
		}
		cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v", "-rapid.nofailfile", "-rapid.checks=200") // each planted bug is found in ~10% of cases, so 200 miss with odds below 1e-8
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	outs := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for mutant, check := range maps.All(mutants) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out := child(mutant, check)
			mu.Lock()
			outs[mutant] = out
			mu.Unlock()
		})
	}
	out := child("none", "")
	wg.Wait()
	if !strings.Contains(out, "--- PASS: TestMutants/none (") || strings.Contains(out, "--- FAIL") {
		t.Fatalf("the plain map store did not pass:\n%s", out)
	}
	for mutant, check := range mutants {
		want := "--- FAIL: TestMutants/" + strings.ReplaceAll(mutant, " ", "_") + "/" + check + " ("
		if !strings.Contains(outs[mutant], want) {
			t.Errorf("mutant %q: check %s did not fail:\n%s", mutant, check, outs[mutant])
		}
	}
}
