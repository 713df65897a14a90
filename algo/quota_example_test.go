package algo_test

import (
	"fmt"
	"time"

	"github.com/ratebucket/ratebucket/algo"
)

// A quota of 3 a month: the fourth request of February 2028 (a leap year)
// waits exactly until March 1st, 00:00 UTC.
func ExampleQuota() {
	p := algo.Quota(3, algo.Month, 0)
	var (
		tb  algo.TokenBucket
		s   algo.State
		res algo.Result
	)
	now := time.Date(2028, 2, 28, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= 4; i++ {
		s, res, _ = tb.Take(p, s, now.UnixMicro(), 1)
		fmt.Printf("take %d: allowed=%v remaining=%d\n", i, res.Allowed, res.Remaining)
	}
	fmt.Println("retry at", now.Add(res.RetryAfter).Format(time.DateTime))
	_, end := p.QuotaPeriod(now.UnixMicro())
	fmt.Println(p, "- this period ends", time.UnixMicro(end).UTC().Format(time.DateTime))
	// Output:
	// take 1: allowed=true remaining=2
	// take 2: allowed=true remaining=1
	// take 3: allowed=true remaining=0
	// take 4: allowed=false remaining=0
	// retry at 2028-03-01 00:00:00
	// 3 per month - this period ends 2028-03-01 00:00:00
}
