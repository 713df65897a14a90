package grpclimit

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// settleTTL is how long a call's hold stays open (Rule.Settle): a call
// that runs longer, or whose handler panics, is charged its estimate.
const settleTTL = 5 * time.Minute

// holding is an admitted call's open hold.
type holding struct {
	rule *rule
	req  store.Request
	hold algo.Hold
}

// settle closes h at the cost the call's trailers report (md), or at its
// estimate when they report none. A failure is logged: the estimate stays
// charged.
func (l *Limiter) settle(ctx context.Context, method string, h *holding, md metadata.MD) {
	actual := h.hold.Estimate
	if v := md.Get(h.rule.settle); len(v) > 0 {
		if n, err := strconv.ParseInt(v[len(v)-1], 10, 64); err == nil && n >= 0 {
			actual = n
		}
	}
	ctx = context.WithoutCancel(ctx) // the caller may have left
	if _, err := l.store.Settle(ctx, h.req.Key, h.req.Policy, h.hold, actual); err != nil {
		l.log(ctx, "grpclimit: settle failed; the call stays charged its estimate", method, err)
	}
}

// trailerSet records the trailers a handler sets.
type trailerSet struct {
	mu sync.Mutex
	md metadata.MD
}

func (t *trailerSet) add(md metadata.MD) {
	t.mu.Lock()
	t.md = metadata.Join(t.md, md)
	t.mu.Unlock()
}

func (t *trailerSet) get() metadata.MD {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.md
}

// trailers is a unary call's transport stream, seen by grpc.SetTrailer:
// it records the trailers and passes them on.
type trailers struct {
	grpc.ServerTransportStream
	trailerSet
}

// SetTrailer records md and sets it on the call.
func (t *trailers) SetTrailer(md metadata.MD) error {
	t.add(md)
	return t.ServerTransportStream.SetTrailer(md)
}

// trailerStream is a stream that records the trailers its handler sets.
type trailerStream struct {
	grpc.ServerStream
	trailerSet
}

// SetTrailer records md and sets it on the stream.
func (s *trailerStream) SetTrailer(md metadata.MD) {
	s.add(md)
	s.ServerStream.SetTrailer(md)
}
