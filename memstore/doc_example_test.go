package memstore_test

import (
	"context"
	"fmt"

	"github.com/ratebucket/ratebucket"
	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/memstore"
)

// The package doc's setup: a memstore on the real clock behind a Limiter.
func Example_limiter() {
	ctx, clientID := context.Background(), "203.0.113.9"

	s, err := memstore.New(memstore.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	lim, err := ratebucket.NewLimiter(s, algo.PerSecond(2).Burst(100), ratebucket.Config{})
	res, err := lim.Allow(ctx, clientID)

	fmt.Println(res.Allowed, res.Remaining, err)
	// Output: true 99 <nil>
}
