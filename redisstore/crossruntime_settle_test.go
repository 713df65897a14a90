package redisstore_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/redistest"
	"github.com/ratebucket/ratebucket/redisstore"
	"github.com/ratebucket/ratebucket/store"
)

// nodeHold is a hold as the Node package keeps it.
type nodeHold struct {
	ID       string `json:"id"`
	Estimate int64  `json:"estimate"`
	Deadline int64  `json:"deadline"`
	Policy   string `json:"policy"`
}

// settleReply is the worker's answer to a hold or a settle.
type settleReply struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Results []struct {
		Allowed   bool
		Remaining int64
	} `json:"results"`
	Hold      *nodeHold `json:"hold"`
	Uncharged int64     `json:"uncharged"`
}

// holdCall has the worker hold (op "h") or settle ("e") on key.
func (w *nodeWorker) holdCall(t *testing.T, op, key string, p algo.Policy, cost, ttl, actual int64, h *nodeHold) settleReply {
	t.Helper()
	msg := map[string]any{"op": op, "hold": h, "reqs": []map[string]any{{
		"key": key, "capacity": p.Capacity(), "unit": p.Unit(), "refill": p.Refill(), "cost": cost, "ttl": ttl, "actual": actual,
	}}}
	if err := w.in.Encode(msg); err != nil {
		t.Fatal(err)
	}
	if !w.out.Scan() {
		t.Fatalf("node worker ended: %v", w.out.Err())
	}
	var r settleReply
	if err := json.Unmarshal(w.out.Bytes(), &r); err != nil || r.Error != "" {
		t.Fatalf("node worker said %q: %v", w.out.Text(), err)
	}
	return r
}

// TestCrossRuntimeSettle: a hold made by one runtime is settled by the
// other, exactly once: Go holds and Node settles, Node holds and Go
// settles, and the second settle of each is refused by the other runtime
// (algo.ErrHoldSettled, RB_HOLD_SETTLED) with the bucket unchanged.
func TestCrossRuntimeSettle(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	s := newStore(t, srv.Client(), redisstore.Config{Prefix: prefix})
	w := startNode(t, false, []string{srv.Addr}, prefix)
	p := algo.PerHour(60).Burst(1000) // a token a minute: still within the test
	wire := func(p algo.Policy) string {
		return jsonInt(p.Capacity()) + ":" + jsonInt(p.Unit()) + ":" + jsonInt(p.Refill())
	}

	h, res, err := s.Hold(ctxT(t), store.Request{Key: "go-held", Policy: p, Cost: 300}, time.Minute)
	if err != nil || !res.Allowed {
		t.Fatalf("Go Hold: %+v %v", res, err)
	}
	nh := &nodeHold{ID: h.ID, Estimate: h.Estimate, Deadline: h.Deadline, Policy: wire(p)}
	if r := w.holdCall(t, "e", "go-held", p, 0, 0, 50, nh); r.Code != "" || r.Results[0].Remaining != 950 {
		t.Fatalf("Node settles Go's hold at 50: %+v, want 950 left", r)
	}
	if _, err := s.Settle(ctxT(t), "go-held", p, h, 50); !errors.Is(err, algo.ErrHoldSettled) {
		t.Fatalf("Go settles it again: %v, want algo.ErrHoldSettled", err)
	}

	r := w.holdCall(t, "h", "node-held", p, 300, time.Minute.Microseconds(), 0, nil)
	if r.Hold == nil || !r.Results[0].Allowed || r.Results[0].Remaining != 700 {
		t.Fatalf("Node Hold: %+v", r)
	}
	gh := algo.Hold{ID: r.Hold.ID, Estimate: r.Hold.Estimate, Deadline: r.Hold.Deadline, Policy: p}
	st, err := s.Settle(ctxT(t), "node-held", p, gh, 1500)
	if err != nil || st.Remaining != 0 || st.Uncharged != 0 {
		t.Fatalf("Go settles Node's hold at 1500: %+v %v, want 500 in debt", st, err)
	}
	if r := w.holdCall(t, "e", "node-held", p, 0, 0, 0, r.Hold); r.Code != "RB_HOLD_SETTLED" {
		t.Fatalf("Node settles it again: %+v, want RB_HOLD_SETTLED", r)
	}
	if res, _ := s.Take(ctxT(t), store.Request{Key: "node-held", Policy: p, Cost: 1}); res.Allowed || res.RetryAfter < 500*time.Minute {
		t.Fatalf("after 500 in debt: %+v, want denied for 501 minutes", res)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
