package ratebucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// Hold takes an estimate before work whose cost is known only after it,
// and Settle charges the real cost: the difference back, or the extra into
// debt that the next requests wait out.
func ExampleLimiter_Hold() {
	clk := clock.NewMock()
	s, err := memstore.New(memstore.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	// 1000 LLM tokens a second, in bursts of up to 4000.
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(1000).Burst(4000), ratebucket.Config{Clock: clk})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	h, _ := lim.Hold(ctx, "team-a", 1000, time.Minute) // the estimate
	fmt.Printf("held %d: allowed=%v remaining=%d\n", h.Estimate, h.Allowed, h.Remaining)
	st, _ := h.Settle(ctx, 300) // the completion used 300
	fmt.Printf("settled at 300: remaining=%d\n", st.Remaining)
	h, _ = lim.Hold(ctx, "team-a", 1000, time.Minute)
	st, _ = h.Settle(ctx, 6000) // a long answer: 2300 tokens of debt
	fmt.Printf("settled at 6000: remaining=%d uncharged=%d\n", st.Remaining, st.Uncharged)
	next, _ := lim.Hold(ctx, "team-a", 1000, time.Minute)
	fmt.Printf("next hold: allowed=%v retry after %v\n", next.Allowed, next.RetryAfter)
	_, err = h.Settle(ctx, 1)
	fmt.Println("settled twice:", err)
	// Output:
	// held 1000: allowed=true remaining=3000
	// settled at 300: remaining=3700
	// settled at 6000: remaining=0 uncharged=0
	// next hold: allowed=false retry after 3.3s
	// settled twice: memstore: algo: hold already settled or unknown
}
