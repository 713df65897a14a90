package hybrid

import (
	"context"

	"github.com/ratebucket/ratebucket/observe"
)

// Default names of the components in their events, for a Config without
// Name.
const (
	defaultDenyCacheName = "denycache"
	defaultFallbackName  = "fallback"
	defaultLeasesName    = "leases"
)

// observer reports a component's events to an observe.Observer under its
// name; the zero value reports nothing.
type observer struct {
	o    observe.Observer
	name string
}

func newObserver(o observe.Observer, name, def string) observer {
	if name == "" {
		name = def
	}
	return observer{o: o, name: name}
}

// hit reports a request the DenyCache refused without its primary; i is
// the request that denied, in a multi-limit call, or -1.
func (o observer) hit(ctx context.Context, i int) {
	if o.o == nil {
		return
	}
	h := observe.DenyCacheHit{Store: o.name}
	if l, ok := observe.LabelsFrom(ctx); ok {
		h.Route, h.Policy = l.Route, l.Policy
		if i >= 0 && i < len(l.Policies) {
			h.Policy = l.Policies[i]
		}
	}
	o.o.ObserveDenyCacheHit(ctx, h)
}

// breaker reports a Fallback's state change.
func (o observer) breaker(t transition) {
	if o.o != nil {
		o.o.ObserveBreaker(observe.BreakerChange{Store: o.name, From: t.from, To: t.to, Err: t.err})
	}
}

// hit reports a local denial of the DenyCache d (see observer.hit).
func (c *DenyCache) hit(ctx context.Context, i int) { c.obs.hit(ctx, i) }
