package sim

import "testing"

// TestBeyondTake checks what the beyond-take scenario exists to show, on
// the token bucket with a shared store: refunding failed uploads spares
// most of their 429s, Delay spares every one of the bursts', and the
// lease refuses all but 2 of each 6 reports started together. Under the
// fixed window, which has no refunds nor reservations, each pair's rows
// are the same; leases work whatever the algorithm.
func TestBeyondTake(t *testing.T) {
	reps := matrix(t, beyondTake.Name)
	class := func(r *Report, name string) Stats {
		t.Helper()
		s, ok := r.Class(name)
		if !ok {
			t.Fatalf("%s: no class %q", r.Title(), name)
		}
		return s
	}
	token := reps[tokenShared]
	if a, b := class(token, "upload"), class(token, "upload+refund"); b.Requests != a.Requests || b.Denied*4 > a.Denied {
		t.Errorf("refunds: %+v without, %+v with: want the same traffic and under a quarter of the denials", a, b)
	}
	if a, b := class(token, "burst"), class(token, "burst+delay"); b.Requests != a.Requests || a.Denied == 0 || b.Denied != 0 {
		t.Errorf("Delay: %+v without, %+v with: want denials without and none with", a, b)
	}
	if a, b := class(token, "report"), class(token, "report+inflight"); a.Denied != 0 || b.Admitted*3 != b.Requests {
		t.Errorf("leases: %+v without, %+v with: want 2 of every 6 admitted with", a, b)
	}
	fixed := reps[fixedShared]
	for _, pair := range [][2]string{{"upload", "upload+refund"}, {"burst", "burst+delay"}} {
		a, b := class(fixed, pair[0]), class(fixed, pair[1])
		if a.Admitted != b.Admitted || a.Denied != b.Denied {
			t.Errorf("fixed window: %+v and %+v differ, but it cannot refund or reserve", a, b)
		}
	}
	if b := class(fixed, "report+inflight"); b.Admitted*3 != b.Requests {
		t.Errorf("fixed window, leases: %+v; want 2 of every 6 admitted", b)
	}
}
