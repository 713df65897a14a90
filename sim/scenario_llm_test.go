package sim

import (
	"testing"

	"github.com/ratebucket/ratebucket/algo"
)

// TestLLMGateway checks what the llm-gateway scenario exists to show. The
// three classes send the same calls; the focus client's (the timeline's)
// are replayed through algo in each mode, and the law is checked on the
// tokens the admitted calls really used: charging the estimate alone lets
// them run past the stated limit (Capacity + rate·t), settling keeps them
// within it plus one bucket of debt (algo.Policy.SettleBound), with or
// without an estimate. On the shared token bucket the report's law, on what was
// charged, holds with SettleBound's slack, and the modes that settle deny
// some calls that the estimate admitted.
func TestLLMGateway(t *testing.T) {
	reps := matrix(t, llmGateway.Name)
	r := reps[tokenShared]
	if !r.Law.Holds || r.Law.Slack != llmPolicy.FillTime() {
		t.Fatalf("%s: law %v with slack %v, want it to hold with one fill time", r.Title(), r.Law, r.Law.Slack)
	}
	p, tb := llmPolicy, algo.TokenBucket{}
	start := int64(1e15)
	replay := func(mode string) (adm []admission, denied int) {
		var s algo.State
		for _, q := range r.Timeline.Requests {
			now := start + q.At.Microseconds()
			var res algo.Result
			var err error
			switch mode {
			case "estimate":
				s, res, err = tb.Take(p, s, now, llmEstimate)
			default:
				est := llmEstimate
				if mode == "charge-after" {
					est = 0
				}
				var h algo.Hold
				if s, h, res, err = tb.Hold(p, s, now, est, 60e6); err == nil && res.Allowed {
					s, _, err = tb.Settle(p, s, now, h, q.Cost)
				}
			}
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			if res.Allowed {
				adm = append(adm, admission{At: q.At, Cost: q.Cost})
			} else {
				denied++
			}
		}
		return adm, denied
	}
	for _, mode := range []string{"estimate", "settle", "charge-after"} {
		adm, denied := replay(mode)
		stated, err := checkLaw(p, adm, 0)
		if err != nil {
			t.Fatal(err)
		}
		debt, err := checkLaw(p, adm, p.FillTime())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-12s %d of %d calls denied; tokens used against Capacity + rate·t: %v; with the debt bound: %v", mode, denied, len(r.Timeline.Requests), stated, debt)
		if mode == "estimate" && stated.Holds || mode != "estimate" && !debt.Holds {
			t.Errorf("%s: tokens used %v, %v; want the estimate past the stated limit, the settles within SettleBound", mode, stated, debt)
		}
	}
	low := 0.0 // the timeline draws the settled bucket's debt, below zero
	for _, lv := range r.Timeline.Levels {
		for _, pt := range lv.Points {
			low = min(low, pt.Tokens)
		}
	}
	if low >= 0 || low < -float64(p.MaxDebt()) {
		t.Errorf("the focus bucket's lowest level is %v, want debt below zero, at most %d", low, p.MaxDebt())
	}
	est, _ := r.Class("estimate")
	set, _ := r.Class("settle")
	if est.Denied >= set.Denied {
		t.Errorf("estimate denied %d, settle %d: the estimate should admit more (undercharging the tail)", est.Denied, set.Denied)
	}
}
