package algo_test

import (
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// A failed upload gives its tokens back: a Refund at once after the Take
// leaves the bucket as it was.
func ExampleTokenBucket_Refund() {
	p := algo.PerMinute(10).Burst(10)
	var tb algo.TokenBucket
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	s, res, _ := tb.Take(p, algo.State{}, now, 4)
	fmt.Println("upload charged 4, remaining", res.Remaining)
	s, res, _ = tb.Refund(p, s, now, 4) // the upload failed
	fmt.Println("refunded, remaining", res.Remaining)
	_, res, _ = tb.Refund(p, s, now, 4) // a refund never raises the bucket above capacity
	fmt.Println("refunded again, remaining", res.Remaining)
	// Output:
	// upload charged 4, remaining 6
	// refunded, remaining 10
	// refunded again, remaining 10
}

// A batch consumer takes what the bucket holds, up to its batch size, and
// learns when the next token comes when it holds none.
func ExampleTokenBucket_TakeAtMost() {
	p := algo.PerSecond(2).Burst(5)
	var tb algo.TokenBucket
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	s, n, _, _ := tb.TakeAtMost(p, algo.State{}, now, 8)
	fmt.Println("batch of 8: granted", n)
	_, n, res, _ := tb.TakeAtMost(p, s, now, 8)
	fmt.Println("again: granted", n, "retry after", res.RetryAfter)
	// Output:
	// batch of 8: granted 5
	// again: granted 0 retry after 500ms
}

// A reservation waits a bounded, exact delay instead of being refused. The
// bucket goes into debt meanwhile, so a Take is denied until the reserved
// tokens have refilled; cancelling before the delay gives them back.
func ExampleTokenBucket_Reserve() {
	p := algo.PerSecond(1).Burst(2)
	var tb algo.TokenBucket
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	s, _, _ := tb.Take(p, algo.State{}, now, 2) // empty
	_, r, _ := tb.Reserve(p, s, now, 1, 500_000)
	fmt.Println("maxWait 500ms: admitted", r.Allowed, "retry after", r.RetryAfter)
	s, r, _ = tb.Reserve(p, s, now, 1, 5_000_000)
	fmt.Println("maxWait 5s: admitted", r.Allowed, "proceed after", r.Delay)
	_, res, _ := tb.Take(p, s, now+500_000, 1)
	fmt.Println("a Take 500ms later: allowed", res.Allowed, "retry after", res.RetryAfter)
	s, ok, res, _ := tb.Cancel(p, s, now+500_000, r.Ticket)
	fmt.Println("cancelled:", ok, "remaining", res.Remaining, "full after", res.ResetAfter)
	// Output:
	// maxWait 500ms: admitted false retry after 500ms
	// maxWait 5s: admitted true proceed after 1s
	// a Take 500ms later: allowed false retry after 1.5s
	// cancelled: true remaining 0 full after 1.5s
}
