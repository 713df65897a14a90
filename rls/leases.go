package rls

import (
	"context"

	"github.com/ratebucket/ratebucket/algo"
	"github.com/ratebucket/ratebucket/store"
)

// The groups of a request's buckets: taken together (enforced), reported
// only (shadow_mode, quota_mode), or one by one from leased batches.
const (
	groupEnforce = iota
	groupShadow
	groupLeased
	groupCount
)

// groupOf returns the group of a bucket of limit l (nil: an override).
func (s *Service) groupOf(l *Limit) int {
	switch {
	case l.soft():
		return groupShadow
	case l != nil && l.Lease && s.leases != nil:
		return groupLeased
	}
	return groupEnforce
}

// takeLeased takes reqs one by one through the Leases, or only peeks at
// them when charge is false; once one is refused, the later ones are only
// peeked at. A refusal gives back what the earlier ones took.
func (s *Service) takeLeased(ctx context.Context, domain string, reqs []store.Request, names []string, charge bool) (store.MultiResult, error) {
	out := store.MultiResult{Allowed: true}
	if len(reqs) == 0 {
		return out, nil
	}
	out.Results = make([]algo.Result, len(reqs))
	for i, r := range reqs {
		if !charge || !out.Allowed {
			r.Cost = 0
		}
		res, err := s.leases.Take(labelled(ctx, domain, names[i:i+1], false), r)
		if err != nil {
			if charge && out.Allowed {
				s.giveBack(ctx, domain, reqs[:i], out)
			}
			return store.MultiResult{}, err
		}
		out.Results[i] = res
		out.Allowed = out.Allowed && res.Allowed
	}
	if charge && !out.Allowed {
		s.giveBack(ctx, domain, reqs, out)
	}
	return out, nil
}

// giveBack refunds the requests of reqs that took tokens (res.Results[i]
// allowed, at a cost), after a later refusal. A refund that fails is
// logged: those tokens stay taken, which only errs on the side of the
// limit.
func (s *Service) giveBack(ctx context.Context, domain string, reqs []store.Request, res store.MultiResult) {
	for i, r := range reqs {
		if i >= len(res.Results) || !res.Results[i].Allowed || r.Cost == 0 {
			continue
		}
		if _, err := s.leases.Refund(context.WithoutCancel(ctx), r); err != nil && s.logged.ok() {
			s.logger.Warn("rls: could not give back a leased descriptor's tokens after a refusal", "domain", domain, "err", err)
		}
	}
}

// leasedDomain returns a domain of c with a lease: true descriptor, or "".
func (c *Config) leasedDomain() string {
	for _, d := range c.Domains() {
		if c.domains[d].leased() {
			return d
		}
	}
	return ""
}

// leased reports whether n or a descriptor under it has lease: true.
func (n *node) leased() bool {
	if n.limit != nil && n.limit.Lease {
		return true
	}
	for _, c := range n.byValue {
		if c.leased() {
			return true
		}
	}
	for _, c := range n.byKey {
		if c.leased() {
			return true
		}
	}
	for _, w := range n.wildcards {
		if w.n.leased() {
			return true
		}
	}
	return false
}
