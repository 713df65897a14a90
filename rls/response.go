package rls

import (
	"math"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/internal/limitheader"
)

// respond builds the response from decided items.
func (s *Service) respond(items []item, domain string) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(items))}
	header := -1 // the item the headers describe
	for i := range items {
		it := &items[i]
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, CurrentLimit: it.proto}
		resp.Statuses[i] = st
		result := resultOK
		switch it.kind {
		case kindNone:
			st.CurrentLimit = nil
			result = resultNoLimit
		case kindUnlimited:
			st.CurrentLimit = nil
			st.LimitRemaining = math.MaxUint32
			result = resultUnlimited
		case kindBlocked:
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			d := time.Duration(0)
			if it.policy != (algo.Policy{}) {
				d = it.policy.FillTime()
			} else if u := unitLength(it.proto.Unit); u > 0 {
				d = u
			}
			st.DurationUntilReset = durationpb.New(d)
			if it.grouped {
				st.LimitRemaining = uint32(min(it.res.Remaining, math.MaxUint32))
			}
			it.res = algo.Result{Remaining: it.res.Remaining, RetryAfter: d, ResetAfter: d}
		case kindTake:
			st.LimitRemaining = uint32(min(it.res.Remaining, math.MaxUint32))
			if it.res.Allowed {
				st.DurationUntilReset = durationpb.New(it.res.ResetAfter)
			} else {
				st.Code = pb.RateLimitResponse_OVER_LIMIT
				st.DurationUntilReset = durationpb.New(it.res.RetryAfter)
			}
		}
		if st.Code == pb.RateLimitResponse_OVER_LIMIT {
			result = resultOver
			if it.limit.soft() {
				st.Code = pb.RateLimitResponse_OK
				result = resultShadowOver
			} else {
				resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			}
		}
		if s.metrics != nil {
			s.metrics.decisions.WithLabelValues(domain, result).Inc()
		}
		if it.kind >= kindBlocked && (header < 0 || better(st, resp.Statuses[header], it, &items[header])) {
			header = i
		}
	}
	if s.opt.ResponseHeaders && header >= 0 {
		s.addHeaders(resp, resp.Statuses[header], &items[header])
	}
	return resp
}

// better reports whether status a (of item ia) should be described by the
// headers rather than b: an enforced refusal with the longer wait, else the
// fewest tokens left.
func better(a, b *pb.RateLimitResponse_DescriptorStatus, ia, ib *item) bool {
	overA := a.Code == pb.RateLimitResponse_OVER_LIMIT
	overB := b.Code == pb.RateLimitResponse_OVER_LIMIT
	switch {
	case overA != overB:
		return overA
	case overA:
		return ia.res.RetryAfter > ib.res.RetryAfter
	}
	return a.LimitRemaining < b.LimitRemaining
}

// addHeaders adds the rate-limit headers describing st (of item it):
// internal/limitheader's values, httplimit's and grpclimit's, pinned by
// internal/testdata/ratelimit-headers.json.
func (s *Service) addHeaders(resp *pb.RateLimitResponse, st *pb.RateLimitResponse_DescriptorStatus, it *item) {
	limit := it.policy.Capacity()
	if it.policy == (algo.Policy{}) {
		limit = int64(it.proto.RequestsPerUnit)
	}
	f := limitheader.Render(s.clock.Now(), limitheader.Answer{
		Name:       it.limit.draftName(),
		Capacity:   limit,
		Remaining:  int64(st.LimitRemaining),
		ResetAfter: it.res.ResetAfter,
		RetryAfter: it.res.RetryAfter,
		Denied:     resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT,
	})
	resp.ResponseHeadersToAdd = []*core.HeaderValue{
		{Key: s.opt.HeaderLimit, Value: f.Limit},
		{Key: s.opt.HeaderRemaining, Value: f.Remaining},
		{Key: s.opt.HeaderReset, Value: f.Reset},
		{Key: limitheader.RateLimit, Value: f.RateLimit},
	}
	if f.RetryAfter != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&core.HeaderValue{Key: limitheader.RetryAfter, Value: f.RetryAfter})
	}
}

// draftName is the limit's name in the ratelimit header: its configured
// name, "override" for a limit Envoy sent with the descriptor (nil here),
// "default" for an unnamed one.
func (l *Limit) draftName() string {
	switch {
	case l == nil:
		return "override"
	case l.Name == "":
		return "default"
	}
	return l.Name
}
